package schedule

// State is what the coordination tables say about one hunt at a tick: its newest watermark,
// its newest lease and its newest run-now request. Times are epoch seconds except LeaseUntilMs:
// hunt_lease.lease_until is DateTime64(3), and comparing it with the whole-second now must keep
// its milliseconds (a lease until 100.5 is still live at 100).
type State struct {
	Watermark    int64 // hunt_watermark.watermark of the newest row
	HasWatermark bool

	LeaseUntilMs int64 // hunt_lease.lease_until of the newest row by (claimed, claim_id), in ms
	HasLease     bool

	RequestedFire int64 // the greatest hunt_request.requested_fire
	HasRequest    bool
}

// RequestPending reports whether a run-now request is still owed: it is pending while its
// requested fire is beyond the watermark (with no watermark, any request is pending).
func (s State) RequestPending() bool {
	return s.HasRequest && (!s.HasWatermark || s.RequestedFire > s.Watermark)
}

// LeaseFree reports whether no live lease blocks a claim at now: no lease, or the newest lease
// expired (lease_until <= now).
func (s State) LeaseFree(now int64) bool {
	return !s.HasLease || s.LeaseUntilMs <= now*1000
}

// IsDue is the due predicate, identical to DueCountSQL: the row is live (enabled, positive
// interval), its latest fire is not yet covered by the watermark or a run-now request is
// pending, and no live lease holds it.
func IsDue(now int64, row Row, st State) bool {
	if !row.Live() || !st.LeaseFree(now) {
		return false
	}
	if st.RequestPending() || !st.HasWatermark {
		return true
	}
	return st.Watermark < LatestFire(now, int64(row.IntervalSeconds), int64(row.PhaseOffset))
}
