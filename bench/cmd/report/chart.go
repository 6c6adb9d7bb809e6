package main

import (
	"fmt"
	"math"
	"os"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// The chart's size in pixels, at vgimg's default 96 dpi.
const (
	chartWidthPx  = 1240
	chartHeightPx = 520
	chartDPI      = 96
	legendWidthPx = 120 // a column of its own at the right, so it hides no bar
	barWidthPx    = 26  // at most; narrower when a group's bars would not fit
	groupWidthPx  = 156 // a group's bars together, at most: six of barWidthPx
)

func px(n float64) vg.Length { return vg.Length(n) * vg.Inch / chartDPI }

// drawChart draws, at GOMAXPROCS procs, to a PNG at path: a panel of
// grouped bars of median ns/op, a group per throughput workload and a bar
// per pool; and, for each latency workload, a panel of its median wait
// percentiles, a group per percentile and a bar per pool. The pools share
// one legend and one colour each. Without latency workloads the ns/op
// panel takes the whole width.
func drawChart(d *data, procs int, path string) error {
	throughput, latency, _ := d.split() // the cycle workloads are in RESULTS.md's tables only
	legend := plot.NewLegend()
	legend.Top, legend.Left = true, true
	legend.TextStyle.Font.Size = vg.Points(11)

	var panels []*plot.Plot
	if len(throughput) > 0 {
		p := newLogPanel(fmt.Sprintf("Lease + release, median ns/op at -cpu %d\n(%s; lower is better)", procs, runsPerCell(d)), "ns/op (log scale)", "workload", log10Ticks)
		err := addBars(p, d.pools, throughput, func(pool, wl string) (float64, bool) {
			c, ok := d.cell(wl, pool, procs)
			return c.ns, ok && c.ns > 0
		}, fmtNs, &legend)
		if err != nil {
			return err
		}
		panels = append(panels, p)
	}
	percentiles := []struct {
		name string
		m    latMetric
	}{{"p50", latP50}, {"p99", latP99}, {"p99.9", latP999}}
	groups := make([]string, len(percentiles))
	for i, pc := range percentiles {
		groups[i] = pc.name
	}
	for _, wl := range latency {
		p := newLogPanel(fmt.Sprintf("%s: wait for an item, median percentiles at -cpu %d\n(64 goroutines, 8 items, 20 µs work each; lower is better)", wl, procs), "wait (log scale)", "percentile", durTicks)
		withLegend := &legend
		if len(panels) > 0 {
			withLegend = nil // the pools are in the legend already
		}
		err := addBars(p, d.pools, groups, func(pool, group string) (float64, bool) {
			c, ok := d.cell(wl, pool, procs)
			v := c.lat[percentiles[slices.Index(groups, group)].m]
			return v, ok && v > 0
		}, fmtDurShort, withLegend)
		if err != nil {
			return err
		}
		panels = append(panels, p)
	}
	if len(panels) == 0 {
		return fmt.Errorf("chart: no workloads to draw")
	}

	c := vgimg.NewWith(vgimg.UseWH(px(chartWidthPx), px(chartHeightPx)), vgimg.UseDPI(chartDPI))
	dc := draw.New(c)
	// The panels share the width left of the legend equally.
	panelW := (chartWidthPx - legendWidthPx) / float64(len(panels))
	for i, p := range panels {
		left := px(float64(i) * panelW)
		right := -px(chartWidthPx - float64(i+1)*panelW)
		p.Draw(draw.Crop(dc, left, right, 0, 0))
	}
	legend.YOffs = -px(60)
	legend.Draw(draw.Crop(dc, px(chartWidthPx-legendWidthPx+8), 0, 0, 0))

	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("chart: %w", err)
	}
	if _, err := (vgimg.PngCanvas{Canvas: c}).WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("chart: write %s: %w", path, err)
	}
	return f.Close()
}

// newLogPanel returns a plot whose Y axis holds log10 values, labelled by
// ticks.
//
// The scale is logarithmic (sync.Pool's few ns and commons' hundreds must
// both be readable, as must a wait of 50 ns and one of 10 ms), and gonum's
// LogScale cannot draw bars, which start at 0. So each bar's height is
// log10 of its value on a linear axis whose ticks are labelled with the
// values: a bar starts at 1 ns.
func newLogPanel(title, yLabel, xLabel string, ticks func(lo, hi float64) []plot.Tick) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.Title.TextStyle.Font.Size = vg.Points(11)
	p.Y.Label.Text = yLabel
	p.X.Label.Text = xLabel
	p.Y.Tick.Marker = plot.TickerFunc(ticks)
	p.Y.Min = 0
	grid := plotter.NewGrid()
	grid.Vertical.Width = 0 // a line through each group's middle bar only hides it
	p.Add(grid)
	p.X.Tick.Label.Font.Size = vg.Points(11)
	p.X.Tick.Length = 0
	return p
}

// addBars adds to p a group of bars per group, a bar per pool in pool
// order with its colour, each labelled with its value formatted by label;
// value gives a bar's value and whether it has one (a bar without one is
// labelled n/a). When legend is not nil each pool is added to it.
func addBars(p *plot.Plot, pools, groups []string, value func(pool, group string) (float64, bool), label func(float64) string, legend *plot.Legend) error {
	p.NominalX(groups...)
	barWidth := px(min(barWidthPx, groupWidthPx/float64(max(1, len(pools)))))
	maxLog := 0.0
	for i, pool := range pools {
		heights := make(plotter.Values, len(groups))
		xys := make(plotter.XYs, len(groups))
		labels := make([]string, len(groups))
		for j, g := range groups {
			xys[j].X = float64(j)
			labels[j] = "n/a"
			if v, ok := value(pool, g); ok {
				heights[j] = max(0, math.Log10(v))
				labels[j] = label(v)
			}
			xys[j].Y = heights[j]
			maxLog = max(maxLog, heights[j])
		}
		bars, err := plotter.NewBarChart(heights, barWidth)
		if err != nil {
			return fmt.Errorf("chart: %w", err)
		}
		offset := (vg.Length(i) - vg.Length(len(pools)-1)/2) * barWidth
		bars.Offset = offset
		bars.Color = plotutil.Color(i)
		bars.LineStyle.Width = 0
		p.Add(bars)

		values, err := plotter.NewLabels(plotter.XYLabels{XYs: xys, Labels: labels})
		if err != nil {
			return fmt.Errorf("chart: %w", err)
		}
		for k := range values.TextStyle {
			values.TextStyle[k].Font = font.From(plot.DefaultFont, vg.Points(7.5))
			values.TextStyle[k].XAlign = text.XCenter
			values.TextStyle[k].YAlign = text.YBottom
		}
		values.Offset = vg.Point{X: offset, Y: vg.Points(2)}
		p.Add(values)

		if legend != nil {
			legend.Add(pool, bars)
		}
	}
	p.Y.Max = maxLog + 0.15 // headroom for the value labels
	// Each group a unit wide around its index, so the data area (and the
	// grid) spans the bars rather than the groups' centres.
	p.X.Min, p.X.Max = -0.5, float64(len(groups))-0.5
	return nil
}

// log10Ticks marks an axis of log10 values with the values themselves: a
// labelled major tick at each power of ten, minor ticks at 2×…9×.
func log10Ticks(lo, hi float64) []plot.Tick {
	var ticks []plot.Tick
	for e := math.Floor(lo); e <= math.Ceil(hi); e++ {
		for m := 1; m < 10; m++ {
			v := e + math.Log10(float64(m))
			if v < lo-1e-9 || v > hi+1e-9 {
				continue
			}
			t := plot.Tick{Value: v}
			if m == 1 {
				t.Label = fmt.Sprintf("%g", math.Pow(10, e))
			}
			ticks = append(ticks, t)
		}
	}
	return ticks
}

// durTicks is log10Ticks with the majors labelled as durations of that
// many ns (1 µs, 10 ms) rather than as numbers.
func durTicks(lo, hi float64) []plot.Tick {
	ticks := log10Ticks(lo, hi)
	for i := range ticks {
		if ticks[i].Label != "" {
			ticks[i].Label = fmtDurShort(math.Pow(10, ticks[i].Value))
		}
	}
	return ticks
}

// fmtDurShort formats nanoseconds as a duration in at most five
// characters (588µs, 1.2ms, 38ms, 1µs), so that a label fits over its bar.
func fmtDurShort(ns float64) string {
	v, unit := ns, "ns"
	for _, u := range []string{"µs", "ms", "s"} {
		if v < 999.5 {
			break
		}
		v, unit = v/1e3, u
	}
	if v < 9.95 {
		return fmt.Sprintf("%.2g%s", v, unit) // 1ms at a tick, 1.2ms over a bar
	}
	return fmt.Sprintf("%.0f%s", v, unit)
}

// chartProcs is the GOMAXPROCS the chart shows: the highest measured.
func chartProcs(d *data) int {
	if len(d.procs) == 0 {
		return 1
	}
	return slices.Max(d.procs)
}
