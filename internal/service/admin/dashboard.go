package admin

import (
	"errors"
	"net/http"
	"net/url"
	"strings"

	"github.com/toolbus/toolbus/pkg/messages"
)

// dashboardCharted is how many namespaces the dashboard draws charts of,
// the busiest; the table lists every namespace of the reply.
const dashboardCharted = 6

type dashboardView struct {
	// Namespace, when set, is the one namespace shown.
	Namespace string
	Stats     *messages.CallStatsReply
	// Uncounted says which minutes the coordinator's scan did not reach.
	Uncounted  string
	Calls      *chart
	Totals     []stateTotal
	Namespaces []namespaceRow
	Charted    []namespaceCharts
	// More says how many namespaces have a row but no charts.
	More    int
	Refresh string
	Error   string
}

type stateTotal struct {
	State messages.CallState
	Count int
}

type namespaceRow struct {
	messages.NamespaceStats
	Link string
}

type namespaceCharts struct {
	Name             string
	Link             string
	Wait, Run, Depth *chart
	Now              *messages.QueueDepth
}

func (c *Console) dashboardPage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	view := dashboardView{Namespace: strings.TrimSpace(q.Get("namespace"))}
	refresh := url.Values{"partial": {"1"}}
	if view.Namespace != "" {
		refresh.Set("namespace", view.Namespace)
	}
	view.Refresh = "/dashboard?" + refresh.Encode()
	status := http.StatusOK
	if view.Namespace != "" && messages.ValidateNamespace(view.Namespace) != nil {
		view.Error = "namespace: " + messages.ValidateNamespace(view.Namespace).Error()
		status = http.StatusBadRequest
	} else {
		ctx, cancel := c.busContext(r.Context())
		defer cancel()
		reply, err := c.cfg.Client.Operator().CallStats(ctx, messages.CallStatsRequest{Namespace: view.Namespace})
		switch {
		case errors.Is(err, messages.ErrNoResponders):
			view.Error = "No coordinator answers stats.calls: a coordinator older than this console does not have it (upgrade the coordinators), or none is running."
			status = http.StatusBadGateway
		case err != nil:
			view.Error = "Reading the statistics failed: " + describe(err)
			status = http.StatusBadGateway
		default:
			view.fill(reply)
		}
	}
	if q.Get("partial") == "1" {
		c.fragment(w, "dashboard", "dashboard-body", view)
		return
	}
	title := "Dashboard"
	if view.Namespace != "" {
		title += " of " + view.Namespace
	}
	c.render(w, r, status, "dashboard", pageData{Title: title, Section: "dashboard", Page: view})
}

// fill lays out the page of a stats.calls reply.
func (v *dashboardView) fill(reply *messages.CallStatsReply) {
	v.Stats = reply
	if reply.CountedSince.After(reply.Since) {
		v.Uncounted = "The coordinator read " + count(float64(reply.Scanned)) + " events, its budget, back to " +
			reply.CountedSince.UTC().Format("15:04:05") + " UTC: the minutes before are not counted (shaded)."
	}
	v.Calls = callsChart(reply)
	totals := map[messages.CallState]int{}
	for _, m := range reply.Minutes {
		for st, n := range m.States {
			totals[st] += n
		}
	}
	for _, st := range append(append([]messages.CallState{}, flowStates...), endStates...) {
		v.Totals = append(v.Totals, stateTotal{State: st, Count: totals[st]})
	}
	for i, ns := range reply.Namespaces {
		link := "/dashboard?" + url.Values{"namespace": {ns.Namespace}}.Encode()
		v.Namespaces = append(v.Namespaces, namespaceRow{NamespaceStats: ns, Link: link})
		if i >= dashboardCharted {
			v.More++
			continue
		}
		id := "ns-" + ns.Namespace
		v.Charted = append(v.Charted, namespaceCharts{
			Name: ns.Namespace, Link: link, Now: ns.QueueDepth,
			Wait: withNamespace(latencyChart(id+"-wait", reply.Since, reply.CountedSince, ns.Minutes,
				func(m messages.NamespaceMinute) *messages.Percentiles { return m.QueueWaitMS }, "queue wait"), ns.Namespace),
			Run: withNamespace(latencyChart(id+"-run", reply.Since, reply.CountedSince, ns.Minutes,
				func(m messages.NamespaceMinute) *messages.Percentiles { return m.RunMS }, "run time"), ns.Namespace),
			Depth: withNamespace(depthChart(id+"-depth", reply.Since, ns.Minutes), ns.Namespace),
		})
	}
}

func withNamespace(c *chart, ns string) *chart {
	c.Namespace = ns
	return c
}
