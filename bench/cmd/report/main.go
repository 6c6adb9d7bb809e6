// Command report turns the raw output of the bench module's benchmarks into
// RESULTS.md (provenance, a table per workload, pass/fail for the
// performance targets, benchstat's output) and chart.png. bench/run.sh runs
// it; run by hand:
//
//	go run ./cmd/report -raw raw.txt -benchstat benchstat.txt \
//		-out RESULTS.md -chart chart.png -count 6 -benchtime 1s \
//		-overload-leases 64000 -rtw-leases 16000 [-baseline BASELINE]
//
// BASELINE is another run's raw output (a raw.txt kept from an earlier
// build): with it, the report also checks that msl is no more than 3 %
// slower than there in each ns/op cell the lead targets cover.
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

func main() {
	raw := flag.String("raw", "raw.txt", "benchmark output to read")
	benchstatFile := flag.String("benchstat", "benchstat.txt", "benchstat output to include verbatim (optional)")
	out := flag.String("out", "RESULTS.md", "Markdown report to write")
	chart := flag.String("chart", "chart.png", "PNG chart to write (empty: none)")
	count := flag.String("count", "?", "COUNT the results were run with (for the report)")
	benchtime := flag.String("benchtime", "?", "BENCHTIME the results were run with (for the report)")
	overload := flag.String("overload-leases", "?", "OVERLOAD_LEASES Overload was run with (for the report)")
	rtw := flag.String("rtw-leases", "?", "RTW_LEASES ReleaseThenWork was run with (for the report)")
	baseline := flag.String("baseline", "", "another run's raw output to hold msl's ns/op against (optional)")
	command := flag.String("command", "bench/run.sh", "the command that produced the results (for the report)")
	flag.Parse()
	m := meta{count: *count, benchtime: *benchtime, overload: *overload, rtw: *rtw, baseline: *baseline, command: *command}
	if err := run(*raw, *benchstatFile, *out, *chart, m); err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		os.Exit(1)
	}
}

// run writes the report of the results in raw; m has the flags' part of
// the provenance (the rest it finds), and names the baseline, if any.
func run(raw, benchstatFile, out, chart string, m meta) error {
	d, err := parseFile(raw)
	if err != nil {
		return err
	}
	var base *data
	if m.baseline != "" {
		if base, err = parseFile(m.baseline); err != nil {
			return fmt.Errorf("baseline: %w", err)
		}
	}

	bs := "(benchstat output not available)\n"
	if benchstatFile != "" {
		b, err := os.ReadFile(benchstatFile)
		if err != nil {
			return err
		}
		bs = string(b)
	}

	m.date = time.Now().UTC().Format("2006-01-02 15:04 MST")
	m.goVersion = goVersion()
	m.ncpu = runtime.NumCPU()
	m.goos = firstOf(d.config["goos"], runtime.GOOS)
	m.goarch = firstOf(d.config["goarch"], runtime.GOARCH)
	m.cpu = firstOf(cpuModel(), d.config["cpu"], "unknown")
	m.benchCPU = d.config["cpu"]

	var chartRef string
	if chart != "" {
		if err := drawChart(d, chartProcs(d), chart); err != nil {
			return err
		}
		// RESULTS.md links the chart relative to itself.
		if rel, err := filepath.Rel(filepath.Dir(out), chart); err == nil {
			chartRef = filepath.ToSlash(rel)
		}
	}

	var buf bytes.Buffer
	if err := writeResults(&buf, d, base, m, chartRef, bs); err != nil {
		return err
	}
	return os.WriteFile(out, buf.Bytes(), 0o644)
}

// parseFile parses the benchmark output in the file at path.
func parseFile(path string) (*data, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parse(f, path)
}

// goVersion is `go version` of the go command on PATH, which built the
// benchmarks; failing that, the version that built this report.
func goVersion() string {
	b, err := exec.Command("go", "version").Output()
	if err != nil {
		return runtime.Version()
	}
	return strings.TrimSpace(string(b))
}

// cpuModel is the first "model name" in /proc/cpuinfo, or "".
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func firstOf(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}
