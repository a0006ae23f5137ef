package main

import (
	"bytes"
	"fmt"
	"image/color"
	"math"
	"os"
	"slices"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

var (
	colCeiling = color.RGBA{R: 0x55, G: 0x55, B: 0x55, A: 0xff}
	colAccept  = color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}
	colE2E     = color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}
	colE2ESlow = color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff}
	colLive    = color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}
)

// Chart draws throughput (left) and latency (middle) against concurrency:
// the pgbench ceiling and the accept (worker stopped, and with the pipeline
// live), with the end-to-end rates as points; and, when the run has paced
// phases, their latencies against the rate (right).
func Chart(path string, r *Results) error {
	// Each plot's legend is drawn below it (see the end), where it covers
	// neither the data nor the axes' ticks.
	newPlot := func(title, yLabel, xLabel string, xs []float64) (*plot.Plot, plot.Legend) {
		p := plot.New()
		p.Title.Text, p.Y.Label.Text, p.X.Label.Text = title, yLabel, xLabel
		p.X.Scale = plot.LogScale{}
		ticks := plot.ConstantTicks{}
		for _, x := range xs {
			ticks = append(ticks, plot.Tick{Value: x, Label: strconv.FormatFloat(x, 'f', -1, 64)})
		}
		p.X.Tick.Marker = ticks
		if len(xs) > 0 {
			p.X.Min, p.X.Max = slices.Min(xs)/1.4, slices.Max(xs)*1.4
		}
		l := plot.NewLegend()
		l.Top, l.Left = true, true
		return p, l
	}
	var conc []float64
	for _, c := range r.Setup.Concurrency {
		conc = append(conc, float64(c))
	}
	thr, thrLegend := newPlot("Throughput", "per second", "concurrency (clients)", conc)
	thr.Y.Min = 0
	logY := func(p *plot.Plot) {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	lat, latLegend := newPlot("Latency", "ms (log scale)", "concurrency (clients)", conc)
	logY(lat)
	var rates []float64
	var own, pg, final series
	for _, p := range r.Paced {
		rates = append(rates, p.Rate)
		own.addAt(p.Rate, p.Submit.Latency)
		final.addAt(p.Rate, p.ToFinal)
		if p.Pgbench != nil {
			pg.addAt(p.Rate, p.Pgbench.Latency)
		}
	}
	paced, pacedLegend := newPlot("Paced, open loop", "ms (log scale)", "creates (transactions) per second", rates)
	logY(paced)

	var ceil series
	for _, c := range r.Ceiling {
		if c.TPS > 0 {
			ceil.add(c.Concurrency, c.TPS, c.Latency)
		}
	}
	acc, live := loadSeries(r.Accept), loadSeries(r.AcceptLive)
	// The plots that have points: against concurrency, and against the rate.
	var plots []*plot.Plot
	var legends []*plot.Legend
	if len(ceil.perSec)+len(acc.perSec)+len(live.perSec) > 0 {
		plots, legends = []*plot.Plot{thr, lat}, []*plot.Legend{&thrLegend, &latLegend}
	}
	if len(r.Paced) > 0 {
		plots, legends = append(plots, paced), append(legends, &pacedLegend)
	}
	var ymax float64
	for _, xy := range slices.Concat(ceil.perSec, acc.perSec, live.perSec) {
		ymax = math.Max(ymax, xy.Y)
	}
	for _, l := range []struct {
		p      *plot.Plot
		legend *plot.Legend
		xys    plotter.XYs
		name   string
		col    color.Color
		dashed bool
	}{
		{thr, &thrLegend, ceil.perSec, "ceiling: pgbench tps", colCeiling, false},
		{thr, &thrLegend, acc.perSec, "accept: requests/s", colAccept, false},
		{thr, &thrLegend, live.perSec, "accept, pipeline live: requests/s", colLive, false},
		{lat, &latLegend, ceil.p50, "ceiling p50", colCeiling, true},
		{lat, &latLegend, ceil.p99, "ceiling p99", colCeiling, false},
		{lat, &latLegend, acc.p50, "accept p50", colAccept, true},
		{lat, &latLegend, acc.p99, "accept p99", colAccept, false},
		{lat, &latLegend, live.p50, "accept, pipeline live, p50", colLive, true},
		{lat, &latLegend, live.p99, "accept, pipeline live, p99", colLive, false},
		{paced, &pacedLegend, pg.p50, "pgbench -R p50", colCeiling, true},
		{paced, &pacedLegend, pg.p99, "pgbench -R p99", colCeiling, false},
		{paced, &pacedLegend, own.p50, "202 p50", colLive, true},
		{paced, &pacedLegend, own.p99, "202 p99", colLive, false},
		{paced, &pacedLegend, final.p50, "202 → final p50", colE2E, true},
		{paced, &pacedLegend, final.p99, "202 → final p99", colE2E, false},
	} {
		if err := addLine(l.p, l.legend, l.xys, l.name, l.col, l.dashed); err != nil {
			return err
		}
	}
	for i, e := range r.EndToEnd {
		if e.CreatesPerSec <= 0 {
			continue
		}
		s, err := plotter.NewScatter(plotter.XYs{{X: float64(e.Concurrency), Y: e.CreatesPerSec}})
		if err != nil {
			return err
		}
		// The first latency's point in red, the others' in orange.
		col := []color.Color{colE2E, colE2ESlow}[min(i, 1)]
		s.GlyphStyle.Color, s.GlyphStyle.Radius, s.GlyphStyle.Shape = col, vg.Points(4), draw.PyramidGlyph{}
		thr.Add(s)
		thrLegend.Add(fmt.Sprintf("end to end, sim %g ms: creates/s", e.SimLatencyMs), s)
		ymax = math.Max(ymax, e.CreatesPerSec)
	}
	thr.Y.Max = ymax * 1.25
	for _, p := range plots {
		p.Add(plotter.NewGrid())
	}

	// The figure: a title naming the run's date and machine, the plots, and
	// each plot's legend in a band below it.
	const height, titleBand, legendBand = 500, 34, 86
	width := 480 * float64(max(2, len(plots)))
	img := vgimg.New(vg.Points(width), vg.Points(height))
	dc := draw.New(img)
	title := thr.Title.TextStyle
	title.Font.Size = vg.Points(13)
	title.XAlign, title.YAlign = draw.XCenter, draw.YCenter
	dc.FillText(title, vg.Point{X: vg.Points(width / 2), Y: vg.Points(height - titleBand/2)}, ChartTitle(r))

	body := draw.Crop(dc, 0, 0, vg.Points(legendBand), -vg.Points(titleBand))
	tiles := draw.Tiles{Rows: 1, Cols: len(plots), PadX: vg.Points(24), PadTop: vg.Points(4), PadBottom: vg.Points(8), PadLeft: vg.Points(8), PadRight: vg.Points(12)}
	canvases := plot.Align([][]*plot.Plot{plots}, tiles, body)
	for i, l := range legends {
		plots[i].Draw(canvases[0][i])
		// Under its plot's data area, left-aligned with the plot's canvas.
		c := canvases[0][i]
		band := draw.Canvas{Canvas: dc.Canvas, Rectangle: vg.Rectangle{
			Min: vg.Point{X: c.Min.X + vg.Points(48), Y: vg.Points(4)},
			Max: vg.Point{X: c.Max.X, Y: vg.Points(legendBand - 4)},
		}}
		l.Draw(band)
	}
	var png bytes.Buffer
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(&png); err != nil {
		return err
	}
	return os.WriteFile(path, png.Bytes(), 0o644)
}

// ChartTitle names what the chart shows, when and where it was measured:
// the run's date and mode, and the machine.
func ChartTitle(r *Results) string {
	m := r.Machine
	t := fmt.Sprintf("labels bench %s (%s run) · %d × %s, %.0f GiB", r.Date, r.Mode, m.CPUs, m.CPUModel, m.MemoryGiB)
	// "PostgreSQL 15.20 (Debian …) on x86_64-pc-linux-gnu, compiled by …": the name and version.
	if pg := firstWords(m.PostgreSQL, 2); pg != "" {
		t += " · " + pg
	}
	if m.GoVersion != "" {
		t += " · " + m.GoVersion
	}
	return t
}

// series is one kind of run's points against concurrency: its throughput
// and its latency percentiles.
type series struct{ perSec, p50, p99 plotter.XYs }

func (s *series) add(concurrency int, perSec float64, l Latency) {
	s.perSec = append(s.perSec, plotter.XY{X: float64(concurrency), Y: perSec})
	s.addAt(float64(concurrency), l)
}

// addAt adds a latency's p50 and p99 at x.
func (s *series) addAt(x float64, l Latency) {
	s.p50 = append(s.p50, plotter.XY{X: x, Y: positive(l.P50)})
	s.p99 = append(s.p99, plotter.XY{X: x, Y: positive(l.P99)})
}

// loadSeries is the points of the loads that sent requests.
func loadSeries(runs []LoadRun) series {
	var s series
	for _, a := range runs {
		if a.Requests > 0 {
			s.add(a.Concurrency, a.PerSec, a.Latency)
		}
	}
	return s
}

func addLine(p *plot.Plot, legend *plot.Legend, xys plotter.XYs, name string, col color.Color, dashed bool) error {
	if len(xys) == 0 {
		return nil
	}
	l, s, err := plotter.NewLinePoints(xys)
	if err != nil {
		return err
	}
	l.LineStyle.Color, l.LineStyle.Width = col, vg.Points(1.5)
	if dashed {
		l.LineStyle.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
	}
	s.GlyphStyle.Color, s.GlyphStyle.Radius, s.GlyphStyle.Shape = col, vg.Points(2.5), draw.CircleGlyph{}
	p.Add(l, s)
	legend.Add(name, l, s)
	return nil
}

// positive keeps a log axis away from zero.
func positive(v float64) float64 { return math.Max(v, 0.01) }
