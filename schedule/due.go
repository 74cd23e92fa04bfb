package schedule

// State is what the coordination tables say about one hunt at a tick: its newest watermark,
// its newest lease, its newest hunt_state row's retry_after and its newest run-now request.
// Times are epoch seconds except the two *Ms fields: lease_until and retry_after are
// DateTime64(3), and comparing them with the whole-second now must keep their milliseconds (a
// lease until 100.5 is still live at 100).
type State struct {
	Watermark    int64 // the greatest hunt_watermark.watermark (commits only raise it)
	HasWatermark bool

	LeaseUntilMs int64 // hunt_lease.lease_until of the newest row by (claimed, claim_id), in ms
	LeaseFire    int64 // that row's fire: once the watermark reaches it, the lease is spent
	HasLease     bool

	// RetryAfterMs is hunt_state.retry_after of the newest row by updated, in ms: a failing
	// hunt is not claimed, nor counted as due, before it. HasRetryAfter is false when the hunt
	// has no hunt_state row or its newest row sets no retry_after (the column's 0).
	RetryAfterMs  int64
	HasRetryAfter bool

	RequestedFire int64 // the greatest hunt_request.requested_fire
	HasRequest    bool

	// Paused is true when the newest hunt_pause row of the hunt pauses it (a resume row, or no
	// row, leaves it false). PausedUntilMs is that row's paused_until in ms, 0 for a pause
	// until resumed. A paused hunt is not due (PausedAt).
	Paused        bool
	PausedUntilMs int64

	// FirstOwed is, for a hunt that never committed, the oldest fire it is known to owe; only
	// Behind reads it. Without it a never-committed hunt counts as behind from its latest fire
	// only, which understates how long a hunt that has failed since it was published is behind.
	FirstOwed    int64
	HasFirstOwed bool
}

// RequestPending reports whether a run-now request is still to be run: it is pending while its
// requested fire is beyond the watermark (with no watermark, any request is pending). It is owed
// (see Owed) once its fire has come.
func (s State) RequestPending() bool {
	return s.HasRequest && (!s.HasWatermark || s.RequestedFire > s.Watermark)
}

// LeaseFree reports whether no lease blocks a claim at now: no lease, the newest lease expired
// (lease_until <= now), or it is spent: its fire is committed (fire <= watermark). A lease
// protects the one fire it was won for; once that fire is committed, there is nothing left
// to protect, so a commit frees its hunt without a release.
func (s State) LeaseFree(now int64) bool { return s.LeaseFreeAt(now * 1000) }

// LeaseFreeAt is LeaseFree at an instant in milliseconds: a runner plans on the server's
// sub-second clock.
func (s State) LeaseFreeAt(nowMs int64) bool {
	return !s.HasLease || s.LeaseUntilMs <= nowMs || s.LeaseSpent()
}

// LeaseSpent reports whether the newest lease's fire is committed.
func (s State) LeaseSpent() bool { return s.HasLease && s.HasWatermark && s.LeaseFire <= s.Watermark }

// BackingOff reports whether the hunt is in backoff at now (retry_after > now). The bound is
// the same as a lease's: at retry_after exactly the hunt may be claimed again.
func (s State) BackingOff(now int64) bool { return s.BackingOffAt(now * 1000) }

// BackingOffAt is BackingOff at an instant in milliseconds.
func (s State) BackingOffAt(nowMs int64) bool {
	return s.HasRetryAfter && s.RetryAfterMs > nowMs
}

// PausedAt reports whether a pause holds at nowMs: the newest pause row pauses the hunt until
// resumed, or until a paused_until still ahead. At paused_until exactly the hunt is free again,
// as with a lease.
func (s State) PausedAt(nowMs int64) bool {
	return s.Paused && (s.PausedUntilMs == 0 || s.PausedUntilMs > nowMs)
}

// Owed is the fire a worker owes at now, whatever leases and backoff say: the latest fire while
// the watermark is below it (or absent); otherwise a pending run-now request whose fire has
// come (watermark < requested fire <= now), with requested set. A request for a later fire
// waits for it: no runner may claim a fire beyond now. row must be live.
func Owed(now int64, row Row, st State) (fire int64, requested, ok bool) {
	latest := LatestFire(now, int64(row.IntervalSeconds), int64(row.PhaseOffset))
	if !st.HasWatermark || st.Watermark < latest {
		return latest, false, true
	}
	if st.RequestPending() && st.RequestedFire <= now {
		return st.RequestedFire, true, true
	}
	return 0, false, false
}

// IsDue is the due predicate, identical to store.DueCountSQL: the row is live (enabled, positive
// interval), a fire is owed (Owed), no live lease holds it, it is not in backoff and not paused.
func IsDue(now int64, row Row, st State) bool { return DueAt(now*1000, row, st) }

// DueAt is IsDue at an instant in milliseconds: the fire arithmetic uses its whole second, the
// lease and backoff bounds its milliseconds. At a whole second it is IsDue; between seconds it
// frees a lease or backoff that ends within the second sooner than the SQL (which compares
// with the whole-second now()), so a runner is never stricter than the backlog count.
func DueAt(nowMs int64, row Row, st State) bool { return DueOn(floorDiv(nowMs, 1000), nowMs, row, st) }

// DueOn is DueAt with the schedule read at scheduleNow (epoch seconds: which fire is owed) and
// leases, backoff and pauses at nowMs. They are one instant in production; a test pins the
// schedule to a fixed instant while the rows keep the server's clock they were written with.
func DueOn(scheduleNow, nowMs int64, row Row, st State) bool {
	if !row.Live() || !st.LeaseFreeAt(nowMs) || st.BackingOffAt(nowMs) || st.PausedAt(nowMs) {
		return false
	}
	_, _, ok := Owed(scheduleNow, row, st)
	return ok
}

// Behind is how many seconds at now the hunt's oldest owed scheduled fire has been owed: 0 when
// the watermark covers the latest fire. With a watermark the oldest owed fire is the first fire
// after it. A hunt that never committed owes from st.FirstOwed when known (capped at the latest
// fire), else from its latest fire. Requests do not count: being behind is about the schedule.
// row must be live.
func Behind(now int64, row Row, st State) int64 {
	iv, off := int64(row.IntervalSeconds), int64(row.PhaseOffset)
	latest := LatestFire(now, iv, off)
	oldest := latest
	switch {
	case st.HasWatermark && st.Watermark >= latest:
		return 0
	case st.HasWatermark:
		oldest = min(NextFire(st.Watermark, iv, off), latest)
	case st.HasFirstOwed:
		oldest = min(st.FirstOwed, latest)
	}
	return now - oldest
}

func floorDiv(a, m int64) int64 { return (a - floorMod(a, m)) / m }
