package messages

import "time"

// EndpointStatsCalls answers the calls of the last minutes, minute by
// minute (stats.calls): how many entered each state, their queue waits
// and run times by namespace, and each namespace's queue depth. It is
// for operators, as audit.list is.
const EndpointStatsCalls = "stats.calls"

// Bounds of a stats.calls request and reply.
const (
	// DefaultStatsMinutes is the window when the request names none.
	DefaultStatsMinutes = 60
	// MaxStatsMinutes is the longest window a request may ask for.
	MaxStatsMinutes = 60
	// MaxStatsNamespaces bounds the namespaces one reply holds.
	MaxStatsNamespaces = 25
)

// CallStatsRequest asks for the statistics of the calls of the last
// Minutes minutes (endpoint stats.calls), of one namespace or of all.
type CallStatsRequest struct {
	Namespace string `json:"namespace,omitempty"`
	// Minutes is the window's length: DefaultStatsMinutes when 0, at most
	// MaxStatsMinutes. The window ends with the minute under way.
	Minutes int `json:"minutes,omitempty"`
}

// Validate checks the namespace's name and the window's length.
func (r *CallStatsRequest) Validate() error {
	if r.Namespace != "" {
		if err := ValidateNamespace(r.Namespace); err != nil {
			return Errorf(CodeBadRequest, "namespace: %v", err)
		}
	}
	return validateRange("minutes", int64(r.Minutes), 0, MaxStatsMinutes)
}

// CallStatsReply holds the statistics of the minutes from Since (the
// start of a minute) to Until (when they were read, within the last
// minute), oldest first.
type CallStatsReply struct {
	Since time.Time `json:"since"`
	Until time.Time `json:"until"`
	// CountedSince is when the oldest event read was stored: every event
	// stored from then until Until was counted. It is Since unless the
	// scan's budget ran out first; the minutes before it, and the part
	// of its own minute before it, were not counted.
	CountedSince time.Time `json:"counted_since"`
	// Scanned is how many events were read.
	Scanned int `json:"scanned"`
	// Minutes are the window's minutes, oldest first, counted over every
	// namespace (or the request's).
	Minutes []StatsMinute `json:"minutes"`
	// Namespaces are the namespaces with calls or queue depth samples in
	// the window, busiest first (see NamespaceStats.Active).
	Namespaces []NamespaceStats `json:"namespaces"`
	// Truncated is set when more than MaxStatsNamespaces namespaces had
	// calls: the busiest MaxStatsNamespaces are listed.
	Truncated bool `json:"truncated,omitempty"`
}

// StatsMinute counts the calls that entered each state in one minute,
// as their events were stored: queued (queued for workers, approved ones
// again), awaiting_approval (held), running (an attempt started), and
// the end states (a result was stored). A state no call entered is
// absent.
type StatsMinute struct {
	Start  time.Time         `json:"start"`
	States map[CallState]int `json:"states,omitempty"`
}

// NamespaceStats are one namespace's statistics over the window, and by
// minute.
type NamespaceStats struct {
	Namespace string `json:"namespace"`
	// Active counts the events of the namespace's calls counted in the
	// window (each entry into a state): what orders the namespaces.
	Active int `json:"active"`
	// Ended counts the results stored in the window.
	Ended int `json:"ended"`
	// QueueWaitMS and RunMS are the percentiles of the queue waits
	// (queued to started) and run times (started to finished) of the
	// calls that ended in the window having started; absent when none.
	QueueWaitMS *Percentiles `json:"queue_wait_ms,omitempty"`
	RunMS       *Percentiles `json:"run_ms,omitempty"`
	// QueueDepth is the latest sample of the namespace's queue; absent
	// when the coordinator took none in the window.
	QueueDepth *QueueDepth `json:"queue_depth,omitempty"`
	// Minutes are the window's minutes, as CallStatsReply.Minutes.
	Minutes []NamespaceMinute `json:"minutes"`
}

// NamespaceMinute is one minute of a namespace.
type NamespaceMinute struct {
	Ended       int          `json:"ended,omitempty"`
	QueueWaitMS *Percentiles `json:"queue_wait_ms,omitempty"`
	RunMS       *Percentiles `json:"run_ms,omitempty"`
	// QueueDepth is the most calls a sample found in the namespace's
	// queue in the minute; absent when none was taken.
	QueueDepth *int64 `json:"queue_depth,omitempty"`
}

// Percentiles sum up durations in milliseconds: how many, the 50th, 90th
// and 99th percentiles by the nearest-rank method, and the largest.
type Percentiles struct {
	Count int   `json:"count"`
	P50   int64 `json:"p50"`
	P90   int64 `json:"p90"`
	P99   int64 `json:"p99"`
	Max   int64 `json:"max"`
}

// QueueDepth is one sample of a namespace's queue: the calls its
// consumer has not delivered yet (Waiting) and those delivered to a
// worker and not acknowledged yet (Delivered: running, or to be
// delivered again), at Time.
type QueueDepth struct {
	Waiting   int64     `json:"waiting"`
	Delivered int64     `json:"delivered"`
	Time      time.Time `json:"time"`
}
