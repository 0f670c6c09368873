package admin

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/toolbus/toolbus/pkg/messages"
)

// The dashboard's charts are SVG drawn on the server: the page loads no
// script library and works offline. A chart is laid out here, in the
// units of its viewBox, and written by the template "chart"; the style
// sheet colours it. Every number a chart shows is also in its hover
// titles, and in the tables beside it.

// chart is one SVG chart: a plot area with its axes, and what is drawn in it.
type chart struct {
	// ID names the chart for the page and its tests.
	ID, Class string
	// Width and Height are the viewBox's; the plot area is the box
	// [Left, Width-right] × [top, Height-Bottom].
	Width, Height, Left, Bottom float64
	Label                       string
	YTicks, XTicks              []tick
	Bars                        []bar
	Lines                       []line
	Dots                        []dot
	// Columns are one hover area per minute, with its values as a title.
	Columns []bar
	// Uncounted shades the minutes the scan did not reach.
	Uncounted *bar
	// Empty, when set, is written across a chart with nothing to draw.
	Empty string
	// Namespace is the namespace of a namespace's chart.
	Namespace string
}

type tick struct {
	At    float64
	Label string
	// Class places an x label: its middle at At, or, for the axis's
	// first and last, its start or end, within the chart.
	Class string
}

// bar is a rectangle: a bar's segment, a hover column, a shaded span.
type bar struct {
	X, Y, W, H float64
	Class      string
	Title      string
	// State and Count describe a segment of the calls chart.
	State string
	Count int
}

// line is a polyline of one series over consecutive minutes.
type line struct {
	Class, Series, Title string
	Points               string
}

// dot marks a series' value in a minute whose neighbours have none.
type dot struct {
	X, Y          float64
	Class, Series string
	Title         string
}

// chart margins, in viewBox units: the left holds the y axis's labels,
// the bottom the x axis's.
const (
	chartTop   = 8.0
	chartRight = 8.0
)

// endStates are the states a call ends in, stacked in this order.
var endStates = []messages.CallState{
	messages.StateCompleted, messages.StateFailed, messages.StateTimedOut, messages.StateCancelled, messages.StateDenied,
}

// flowStates are the states a call passes through, drawn as lines.
var flowStates = []messages.CallState{messages.StateQueued, messages.StateRunning, messages.StateAwaitingApproval}

func newChart(id, class string, width, height, left float64, minutes int, since time.Time) *chart {
	c := &chart{ID: id, Class: class, Width: width, Height: height, Left: left, Bottom: 18}
	step := max(1, minutes/6)
	for i := 0; i <= minutes; i += step {
		c.XTicks = append(c.XTicks, tick{At: c.x(float64(i), minutes), Label: since.Add(time.Duration(i) * time.Minute).UTC().Format("15:04"), Class: "xlabel"})
	}
	c.XTicks[0].Class = "xlabel first"
	if last := &c.XTicks[len(c.XTicks)-1]; len(c.XTicks) > 1 && last.At >= c.PlotRight()-1 {
		last.Class = "xlabel last"
	}
	return c
}

// x is where minute i (fractional: 0.5 is the middle of the first) is drawn.
func (c *chart) x(i float64, minutes int) float64 {
	return c.Left + i*(c.Width-chartRight-c.Left)/float64(minutes)
}

// y is where a value of the scale up to top is drawn.
func (c *chart) y(v, top float64) float64 {
	plot := c.Height - c.Bottom - chartTop
	return c.Height - c.Bottom - v/top*plot
}

// PlotBottom, PlotRight and PlotTop bound the plot area for the
// template; YLabelX and XLabelY place the axes' labels, CenterX and
// CenterY the text of an empty chart.
func (c *chart) PlotBottom() float64 { return c.Height - c.Bottom }
func (c *chart) PlotRight() float64  { return c.Width - chartRight }
func (c *chart) PlotTop() float64    { return chartTop }
func (c *chart) YLabelX() float64    { return c.Left - 4 }
func (c *chart) XLabelY() float64    { return c.Height - 4 }
func (c *chart) CenterX() float64    { return (c.Left + c.PlotRight()) / 2 }
func (c *chart) CenterY() float64    { return (chartTop + c.PlotBottom()) / 2 }

// yScale sets the y axis for values up to most, at least least (so that
// its middle tick is a value the axis's format writes), labelled by
// format, and returns the scale's top.
func (c *chart) yScale(most, least float64, format func(float64) string) float64 {
	top := niceCeil(max(most, least))
	for _, v := range []float64{0, top / 2, top} {
		c.YTicks = append(c.YTicks, tick{At: c.y(v, top), Label: format(v)})
	}
	return top
}

// niceCeil is the smallest of 1, 2 or 4 times a power of ten not below v,
// and 1 for v ≤ 1: the top of a scale whose half is as round.
func niceCeil(v float64) float64 {
	if v <= 1 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 4, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

// count formats a count for an axis.
func count(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

// duration formats milliseconds for an axis or a title: 0, 850ms, 1.5s, 2m5s.
func duration(ms float64) string {
	d := time.Duration(ms) * time.Millisecond
	switch {
	case d == 0:
		return "0"
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + "s"
	}
	return d.Round(time.Second).String()
}

// minuteLabel names minute i of a window for a title.
func minuteLabel(since time.Time, i int) string {
	return since.Add(time.Duration(i)*time.Minute).UTC().Format("15:04") + " UTC"
}

// shadeUncounted shades the minutes before counted, which the scan did
// not reach.
func (c *chart) shadeUncounted(since, counted time.Time, minutes int) {
	if !counted.After(since) {
		return
	}
	upTo := min(float64(minutes), counted.Sub(since).Minutes())
	c.Uncounted = &bar{X: c.x(0, minutes), Y: chartTop, W: c.x(upTo, minutes) - c.x(0, minutes), H: c.PlotBottom() - chartTop,
		Class: "uncounted", Title: "not counted: the scan's budget ran out before " + counted.UTC().Format("15:04:05") + " UTC"}
}

// callsChart draws the calls of each minute: the calls that ended, as
// bars stacked by end state, and those queued, started and held for an
// approval as lines.
func callsChart(reply *messages.CallStatsReply) *chart {
	minutes := len(reply.Minutes)
	c := newChart("calls-chart", "calls-chart", 1200, 230, 44, minutes, reply.Since)
	c.Label = "calls per minute"
	most := 0
	for _, m := range reply.Minutes {
		ended := 0
		for _, st := range endStates {
			ended += m.States[st]
		}
		most = max(most, ended)
		for _, st := range flowStates {
			most = max(most, m.States[st])
		}
	}
	top := c.yScale(float64(most), 2, count)
	c.shadeUncounted(reply.Since, reply.CountedSince, minutes)
	slot := c.x(1, minutes) - c.x(0, minutes)
	for i, m := range reply.Minutes {
		var parts []string
		for _, st := range append(append([]messages.CallState{}, flowStates...), endStates...) {
			if n := m.States[st]; n > 0 {
				parts = append(parts, fmt.Sprintf("%s %d", st, n))
			}
		}
		title := minuteLabel(reply.Since, i) + ": " + strings.Join(parts, ", ")
		if len(parts) == 0 {
			title = minuteLabel(reply.Since, i) + ": no calls"
		}
		c.Columns = append(c.Columns, bar{X: c.x(float64(i), minutes), Y: chartTop, W: slot, H: c.PlotBottom() - chartTop, Class: "column", Title: title})
		base := 0
		for _, st := range endStates {
			n := m.States[st]
			if n == 0 {
				continue
			}
			y0, y1 := c.y(float64(base), top), c.y(float64(base+n), top)
			c.Bars = append(c.Bars, bar{X: c.x(float64(i), minutes) + slot*0.15, Y: y1, W: slot * 0.7, H: y0 - y1,
				Class: "bar st-" + string(st), State: string(st), Count: n, Title: fmt.Sprintf("%s: %s %d", minuteLabel(reply.Since, i), st, n)})
			base += n
		}
	}
	for _, st := range flowStates {
		values := make([]*float64, minutes)
		for i, m := range reply.Minutes {
			if n := m.States[st]; n > 0 || !reply.CountedSince.After(m.Start) {
				values[i] = new(float64(n))
			}
		}
		c.series(values, top, minutes, "st-"+string(st), string(st))
	}
	if most == 0 {
		c.Empty = "No calls in these minutes."
	}
	return c
}

// series draws a series of values by minute as lines over consecutive
// minutes that have one (nil for none), and dots for those alone.
func (c *chart) series(values []*float64, top float64, minutes int, class, name string) {
	var run []string
	flush := func(i int) {
		if len(run) == 1 {
			v := values[i-1]
			c.Dots = append(c.Dots, dot{X: c.x(float64(i-1)+0.5, minutes), Y: c.y(*v, top), Class: class, Series: name})
		} else if len(run) > 1 {
			c.Lines = append(c.Lines, line{Class: class, Series: name, Points: strings.Join(run, " "), Title: name})
		}
		run = run[:0]
	}
	for i, v := range values {
		if v == nil {
			flush(i)
			continue
		}
		run = append(run, fmt.Sprintf("%.1f,%.1f", c.x(float64(i)+0.5, minutes), c.y(*v, top)))
	}
	flush(len(values))
}

// latencyChart draws the 50th, 90th and 99th percentiles of a namespace's
// queue waits or run times, by minute.
func latencyChart(id string, since time.Time, counted time.Time, minutes []messages.NamespaceMinute, pick func(messages.NamespaceMinute) *messages.Percentiles, label string) *chart {
	c := newChart(id, "latency-chart", 400, 150, 46, len(minutes), since)
	c.Label = label
	most := 0.0
	for _, m := range minutes {
		if p := pick(m); p != nil {
			most = max(most, float64(p.P99))
		}
	}
	top := c.yScale(most, 10, duration)
	c.shadeUncounted(since, counted, len(minutes))
	for _, s := range []struct {
		name string
		of   func(*messages.Percentiles) int64
	}{
		{"p50", func(p *messages.Percentiles) int64 { return p.P50 }},
		{"p90", func(p *messages.Percentiles) int64 { return p.P90 }},
		{"p99", func(p *messages.Percentiles) int64 { return p.P99 }},
	} {
		values := make([]*float64, len(minutes))
		for i, m := range minutes {
			if p := pick(m); p != nil {
				values[i] = new(float64(s.of(p)))
			}
		}
		c.series(values, top, len(minutes), "series-"+s.name, s.name)
	}
	slot := c.x(1, len(minutes)) - c.x(0, len(minutes))
	any := false
	for i, m := range minutes {
		p := pick(m)
		if p == nil {
			continue
		}
		any = true
		c.Columns = append(c.Columns, bar{X: c.x(float64(i), len(minutes)), Y: chartTop, W: slot, H: c.PlotBottom() - chartTop, Class: "column",
			Title: fmt.Sprintf("%s: p50 %s, p90 %s, p99 %s, max %s (%d calls)", minuteLabel(since, i), duration(float64(p.P50)), duration(float64(p.P90)), duration(float64(p.P99)), duration(float64(p.Max)), p.Count)})
	}
	if !any {
		c.Empty = "No call ended having started."
	}
	return c
}

// depthChart draws the most calls a namespace's queue held in each
// minute, as the coordinator's sweeps sampled it.
func depthChart(id string, since time.Time, minutes []messages.NamespaceMinute) *chart {
	c := newChart(id, "depth-chart", 400, 150, 46, len(minutes), since)
	c.Label = "queue depth"
	most := 0.0
	values := make([]*float64, len(minutes))
	for i, m := range minutes {
		if m.QueueDepth != nil {
			values[i] = new(float64(*m.QueueDepth))
			most = max(most, float64(*m.QueueDepth))
		}
	}
	top := c.yScale(most, 2, count)
	c.series(values, top, len(minutes), "series-depth", "depth")
	slot := c.x(1, len(minutes)) - c.x(0, len(minutes))
	any := false
	for i, v := range values {
		if v == nil {
			continue
		}
		any = true
		c.Columns = append(c.Columns, bar{X: c.x(float64(i), len(minutes)), Y: chartTop, W: slot, H: c.PlotBottom() - chartTop, Class: "column",
			Title: fmt.Sprintf("%s: at most %s calls in the queue", minuteLabel(since, i), count(*v)), Count: int(*v)})
	}
	if !any {
		c.Empty = "Not sampled in these minutes."
	}
	return c
}
