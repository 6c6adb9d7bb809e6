// Command report turns the raw output of the bench module's benchmarks into
// RESULTS.md (provenance, a table per workload, pass/fail for the
// performance targets, benchstat's output) and chart.png. bench/run.sh runs
// it; run by hand:
//
//	go run ./cmd/report -raw raw.txt -benchstat benchstat.txt \
//		-out RESULTS.md -chart chart.png -count 6 -benchtime 1s -overload-leases 64000
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
	overload := flag.String("overload-leases", "?", "OVERLOAD_LEASES the latency workloads were run with (for the report)")
	command := flag.String("command", "bench/run.sh", "the command that produced the results (for the report)")
	flag.Parse()
	if err := run(*raw, *benchstatFile, *out, *chart, *count, *benchtime, *overload, *command); err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		os.Exit(1)
	}
}

func run(raw, benchstatFile, out, chart, count, benchtime, overload, command string) error {
	f, err := os.Open(raw)
	if err != nil {
		return err
	}
	d, err := parse(f, raw)
	f.Close()
	if err != nil {
		return err
	}

	bs := "(benchstat output not available)\n"
	if benchstatFile != "" {
		b, err := os.ReadFile(benchstatFile)
		if err != nil {
			return err
		}
		bs = string(b)
	}

	m := meta{
		date:      time.Now().UTC().Format("2006-01-02 15:04 MST"),
		goVersion: goVersion(),
		ncpu:      runtime.NumCPU(),
		goos:      firstOf(d.config["goos"], runtime.GOOS),
		goarch:    firstOf(d.config["goarch"], runtime.GOARCH),
		count:     count,
		benchtime: benchtime,
		overload:  overload,
		command:   command,
	}
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
	if err := writeResults(&buf, d, m, chartRef, bs); err != nil {
		return err
	}
	return os.WriteFile(out, buf.Bytes(), 0o644)
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
