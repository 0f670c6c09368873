package main

import "testing"

// calls-list stores the calls it is told to and measures full pages of
// each filter, from the newest call and from the log's history.
func TestCallsListReports(t *testing.T) {
	t.Parallel()
	var r callsListReport
	runToJSON(t, &r, "calls-list", "--calls", "3000", "--pages", "5", "--limit", "20")
	if r.Calls != 3000 || r.Events != 9000 || r.Limit != 20 || len(r.Filters) != 8 || r.CallsGet.P50MS <= 0 {
		t.Fatalf("report %+v", r)
	}
	for _, f := range r.Filters {
		// Every filter matches one call in ten at least: in 3000 calls each
		// page from the newest is full.
		if f.P50MS <= 0 || f.P99MS < f.P50MS || f.From == "newest" && f.Calls != 20 {
			t.Errorf("figure %+v", f)
		}
	}
}
