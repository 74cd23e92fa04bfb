package schedule

import "testing"

// The predicate's pieces on hand-picked cases; TestDueParity checks IsDue against the SQL on
// the full matrix.

func TestOwed(t *testing.T) {
	const now = 1_789_027_300 // latest fire at offset 46 of 60: 1_789_027_246
	const latest = 1_789_027_246
	row := Row{HuntID: "a", IntervalSeconds: 60, PhaseOffset: 46, Enabled: true}
	cases := []struct {
		name      string
		st        State
		fire      int64
		requested bool
		ok        bool
	}{
		{"never ran", State{}, latest, false, true},
		{"behind", State{Watermark: latest - 60, HasWatermark: true}, latest, false, true},
		{"caught up", State{Watermark: latest, HasWatermark: true}, 0, false, false},
		{"request after the watermark", State{Watermark: latest, HasWatermark: true, RequestedFire: now, HasRequest: true}, now, true, true},
		{"request for a later fire waits", State{Watermark: latest, HasWatermark: true, RequestedFire: now + 1, HasRequest: true}, 0, false, false},
		{"request covered by the watermark", State{Watermark: latest, HasWatermark: true, RequestedFire: latest, HasRequest: true}, 0, false, false},
		{"schedule before a request", State{Watermark: latest - 60, HasWatermark: true, RequestedFire: now, HasRequest: true}, latest, false, true},
		{"never ran, with a request: the schedule first", State{RequestedFire: now, HasRequest: true}, latest, false, true},
	}
	for _, tc := range cases {
		fire, requested, ok := Owed(now, row, tc.st)
		if fire != tc.fire || requested != tc.requested || ok != tc.ok {
			t.Errorf("%s: Owed = %d, %v, %v; want %d, %v, %v", tc.name, fire, requested, ok, tc.fire, tc.requested, tc.ok)
		}
	}
}

func TestBackoffAndLeaseBounds(t *testing.T) {
	const now = 1_789_027_300
	row := Row{HuntID: "a", IntervalSeconds: 60, PhaseOffset: 46, Enabled: true}
	for _, tc := range []struct {
		name string
		st   State
		due  bool
	}{
		{"no backoff", State{}, true},
		{"retry_after 0 is none", State{RetryAfterMs: 0, HasRetryAfter: false}, true},
		{"backoff ended before now", State{RetryAfterMs: now*1000 - 1, HasRetryAfter: true}, true},
		{"backoff ends at now", State{RetryAfterMs: now * 1000, HasRetryAfter: true}, true},
		{"backoff ends a millisecond after now", State{RetryAfterMs: now*1000 + 1, HasRetryAfter: true}, false},
		{"lease ends a millisecond after now", State{LeaseUntilMs: now*1000 + 1, HasLease: true}, false},
		// The latest fire is now-54, the one before it now-114.
		{"a live lease on a committed fire is spent", State{Watermark: now - 114, HasWatermark: true,
			LeaseFire: now - 114, LeaseUntilMs: now*1000 + 60_000, HasLease: true}, true},
		{"a live lease on the owed fire holds it", State{Watermark: now - 114, HasWatermark: true,
			LeaseFire: now - 54, LeaseUntilMs: now*1000 + 60_000, HasLease: true}, false},
		{"a live lease with no watermark holds it", State{LeaseFire: now - 114, LeaseUntilMs: now*1000 + 60_000, HasLease: true}, false},
		{"backoff holds a request too", State{Watermark: now - 54, HasWatermark: true, RequestedFire: now, HasRequest: true, RetryAfterMs: now*1000 + 1, HasRetryAfter: true}, false},
		{"paused until resumed", State{Paused: true}, false},
		{"pause ended before now", State{Paused: true, PausedUntilMs: now*1000 - 1}, true},
		{"pause ends at now", State{Paused: true, PausedUntilMs: now * 1000}, true},
		{"pause ends a millisecond after now", State{Paused: true, PausedUntilMs: now*1000 + 1}, false},
		{"resumed (a resume row: not paused)", State{Paused: false, PausedUntilMs: now*1000 + 1}, true},
		{"a pause holds a request too", State{Watermark: now - 54, HasWatermark: true, RequestedFire: now, HasRequest: true, Paused: true}, false},
	} {
		if got := IsDue(now, row, tc.st); got != tc.due {
			t.Errorf("%s: IsDue = %v, want %v", tc.name, got, tc.due)
		}
	}
	// Between seconds DueAt frees a backoff ending within the second; IsDue (whole seconds, as
	// the SQL) does so at the next second.
	st := State{RetryAfterMs: now*1000 + 300, HasRetryAfter: true}
	if DueAt(now*1000+299, row, st) || !DueAt(now*1000+300, row, st) || IsDue(now, row, st) || !IsDue(now+1, row, st) {
		t.Error("backoff bound at millisecond instants")
	}
}

func TestBehind(t *testing.T) {
	const now = 1_789_027_300
	const latest = 1_789_027_246
	row := Row{HuntID: "a", IntervalSeconds: 60, PhaseOffset: 46, Enabled: true}
	for _, tc := range []struct {
		name string
		st   State
		want int64
	}{
		{"caught up", State{Watermark: latest, HasWatermark: true}, 0},
		{"a request does not make it behind", State{Watermark: latest, HasWatermark: true, RequestedFire: now, HasRequest: true}, 0},
		{"one fire owed", State{Watermark: latest - 60, HasWatermark: true}, now - latest},
		{"five fires owed", State{Watermark: latest - 300, HasWatermark: true}, now - (latest - 240)},
		{"off-grid watermark", State{Watermark: latest - 100, HasWatermark: true}, now - (latest - 60)},
		{"never ran, first owed unknown", State{}, now - latest},
		{"never ran, first owed known", State{FirstOwed: latest - 600, HasFirstOwed: true}, now - (latest - 600)},
		{"never ran, first owed after the latest fire", State{FirstOwed: latest + 10, HasFirstOwed: true}, now - latest},
		{"first owed ignored once committed", State{Watermark: latest - 60, HasWatermark: true, FirstOwed: latest - 600, HasFirstOwed: true}, now - latest},
	} {
		if got := Behind(now, row, tc.st); got != tc.want {
			t.Errorf("%s: Behind = %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestRunSpan(t *testing.T) {
	const fire = 1_789_027_200
	for _, tc := range []struct {
		name       string
		wm         int64
		has        bool
		maxCatchup int64
		want       Span
	}{
		{"first run covers one interval", 0, false, 1440, Span{Start: fire - 60, End: fire}},
		{"from the watermark", fire - 120, true, 1440, Span{Start: fire - 120, End: fire}},
		{"exactly the cap: no gap", fire - 300, true, 300, Span{Start: fire - 300, End: fire}},
		{"beyond the cap: the rest is a gap", fire - 600, true, 300, Span{Start: fire - 300, End: fire, GapStart: fire - 600, GapEnd: fire - 300}},
		{"watermark past the fire: empty", fire + 30, true, 300, Span{Start: fire, End: fire}},
	} {
		got := RunSpan(tc.wm, tc.has, fire, 60, tc.maxCatchup)
		if got != tc.want {
			t.Errorf("%s: RunSpan = %+v, want %+v", tc.name, got, tc.want)
		}
		if got.HasGap() != (tc.want.GapEnd > tc.want.GapStart) {
			t.Errorf("%s: HasGap = %v", tc.name, got.HasGap())
		}
	}
}
