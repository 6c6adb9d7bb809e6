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
	chartWidthPx  = 900
	chartHeightPx = 500
	chartDPI      = 96
)

func px(n float64) vg.Length { return vg.Length(n) * vg.Inch / chartDPI }

// drawChart draws grouped bars of median ns/op at GOMAXPROCS procs: a group
// per workload, a bar per pool, to a PNG at path.
//
// The scale is logarithmic (sync.Pool's few ns and commons' hundreds must
// both be readable), and gonum's LogScale cannot draw bars, which start at
// 0. So each bar's height is log10(ns/op) on a linear axis whose ticks are
// labelled with the ns values: a bar starts at 1 ns. Every bar is also
// labelled with its value.
func drawChart(d *data, procs int, path string) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Lease + release, median ns/op at -cpu %d (%s; lower is better)", procs, runsPerCell(d))
	p.Title.TextStyle.Font.Size = vg.Points(12)
	p.Y.Label.Text = "ns/op (log scale)"
	p.X.Label.Text = "workload"
	p.Y.Tick.Marker = plot.TickerFunc(log10Ticks)
	p.Y.Min = 0
	grid := plotter.NewGrid()
	grid.Vertical.Width = 0 // a line through each group's middle bar only hides it
	p.Add(grid)
	p.NominalX(d.workloads...)
	p.X.Tick.Label.Font.Size = vg.Points(11)
	p.X.Tick.Length = 0

	legend := plot.NewLegend()
	legend.Top, legend.Left = true, true
	legend.TextStyle.Font.Size = vg.Points(11)

	barWidth := px(26)
	maxLog := 0.0
	for i, pool := range d.pools {
		heights := make(plotter.Values, len(d.workloads))
		xys := make(plotter.XYs, len(d.workloads))
		labels := make([]string, len(d.workloads))
		for j, wl := range d.workloads {
			xys[j].X = float64(j)
			labels[j] = "n/a"
			if c, ok := d.cell(wl, pool, procs); ok && c.ns > 0 {
				heights[j] = max(0, math.Log10(c.ns))
				labels[j] = fmtNs(c.ns)
			}
			xys[j].Y = heights[j]
			maxLog = max(maxLog, heights[j])
		}
		bars, err := plotter.NewBarChart(heights, barWidth)
		if err != nil {
			return fmt.Errorf("chart: %w", err)
		}
		offset := (vg.Length(i) - vg.Length(len(d.pools)-1)/2) * barWidth
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

		legend.Add(pool, bars)
	}
	p.Y.Max = maxLog + 0.15 // headroom for the value labels
	// Each group a unit wide around its index, so the data area (and the
	// grid) spans the bars rather than the groups' centres.
	p.X.Min, p.X.Max = -0.5, float64(len(d.workloads))-0.5

	c := vgimg.NewWith(vgimg.UseWH(px(chartWidthPx), px(chartHeightPx)), vgimg.UseDPI(chartDPI))
	dc := draw.New(c)
	legendWidth := px(120)
	// The legend gets a column of its own at the right, so it never hides a
	// bar.
	p.Draw(draw.Crop(dc, 0, -legendWidth, 0, 0))
	legend.YOffs = -px(60)
	legend.Draw(draw.Crop(dc, px(chartWidthPx)-legendWidth+px(8), 0, 0, 0))

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

// chartProcs is the GOMAXPROCS the chart shows: the highest measured.
func chartProcs(d *data) int {
	if len(d.procs) == 0 {
		return 1
	}
	return slices.Max(d.procs)
}
