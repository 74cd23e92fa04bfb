package status

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hunt-runner/hunt-runner/hunt"
)

func mustGet(t *testing.T, rep Report, id string) Hunt {
	t.Helper()
	h, ok := rep.Get(id)
	if !ok {
		t.Fatalf("status lacks %s: %+v", id, rep.Hunts)
	}
	return h
}

// A hunt failing 8 times since it was published must look behind by at least those 8
// fires, not by the seconds since its latest fire (issue 15).
func TestNeverSucceededHuntIsBehindFromItsFirstOwedFire(t *testing.T) {
	db := fixture(t)
	for name, entries := range map[string][]hunt.Hunt{"hunt files": fixtureEntries(), "published schedule": nil} {
		rep := read(t, db, entries)
		h := mustGet(t, rep, "failing")
		if h.BehindSeconds < 7*60 {
			t.Errorf("%s: failing is behind %ds after 8 failed fires a minute apart, want ≥ 420s", name, h.BehindSeconds)
		}
		if h.State != StateFailing || h.ConsecutiveFailures != 8 || h.LastSuccess != "" || h.LastRunStatus != "failed" ||
			!strings.Contains(h.LastRunError, "Unknown table") {
			t.Errorf("%s: failing = %+v", name, h)
		}
	}
}

func TestStatusReadsCommitsGapsAndFindings(t *testing.T) {
	db := fixture(t)
	rep := read(t, db, fixtureEntries())
	h := mustGet(t, rep, "healthy")
	if h.State != StateRunning || h.BehindSeconds != 0 || h.Gaps != 1 || h.FindingsLastDay != 5 ||
		h.FindingsDroppedLastDay != 2 || h.LastSuccess == "" || h.LastRunStatus != "succeeded" || h.LastRunRows != 5 ||
		!h.LeaseLive || h.LeaseOwner != "pod-a" || h.Unpublished || h.Paused {
		t.Errorf("healthy = %+v", h)
	}
	if q := mustGet(t, rep, "quiet"); q.State != StateDisabled || q.Due || q.BehindSeconds != 0 {
		t.Errorf("quiet = %+v", q)
	}
	// Its only commit is older than RecentWindow: its watermark stands in for the last success.
	if m := mustGet(t, rep, "monthly"); m.State != StateOK || m.LastSuccess == "" || m.LastSuccess != m.Watermark || m.LastRunStatus != "" {
		t.Errorf("monthly = %+v", m)
	}
	if f := mustGet(t, rep, "fresh"); !f.Unpublished || f.State != StateUnpublished {
		t.Errorf("fresh (in the files, never materialised) = %+v", f)
	}
}

// Runners may run a hunt nobody published (a pod with other hunt files); status must show it,
// marked, and must still hide what materialise retired. Its overrun count is the 2 its state
// row carries plus its one commit row that overran.
func TestUnpublishedHuntsAreShownAndRetiredOnesHidden(t *testing.T) {
	db := fixture(t)
	for name, entries := range map[string][]hunt.Hunt{"hunt files": fixtureEntries(), "published schedule": nil} {
		rep := read(t, db, entries)
		g := mustGet(t, rep, "ghost")
		if !g.Unpublished || g.State != StateUnpublished || g.Watermark == "" || g.OverrunCount != 3 || !g.TooAggressive {
			t.Errorf("%s: ghost = %+v", name, g)
		}
		// From the published schedule a tombstone is listed as disabled; from hunt files
		// that no longer define it, it is left out.
		if r, ok := rep.Get("retired"); (ok && r.State != StateDisabled) || ok != (entries == nil) {
			t.Errorf("%s: retired listed %v as %+v", name, ok, r)
		}
		for _, h := range rep.Hunts {
			if h.Paused {
				t.Errorf("%s: %s paused, and the fixture pauses nothing", name, h.HuntID)
			}
		}
	}
}

func TestPublishedListsTombstonesAsDisabled(t *testing.T) {
	db := fixture(t)
	es, err := Published(t.Context(), db.store())
	if err != nil {
		t.Fatal(err)
	}
	got := []string{}
	for _, e := range es {
		got = append(got, e.ID)
		if e.ID == "retired" && e.Enabled {
			t.Error("retired is enabled")
		}
	}
	if strings.Join(got, ",") != "failing,healthy,monthly,retired" {
		t.Errorf("published %v", got)
	}
}

// Status takes "now" from its Reader's snapshot clock: read a minute past the fixture, healthy
// (every minute at :07, committed up to its latest fire then) owes the next fire.
func TestStatusReadsTheSnapshotClock(t *testing.T) {
	db := fixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	later := db.at.Add(61 * time.Second)
	rep, err := Read(ctx, pinnedClock{Reader: db.store(), now: later}, fixtureEntries())
	if err != nil {
		t.Fatal(err)
	}
	wm := (db.at.Unix()-7)/60*60 + 7
	if h := mustGet(t, rep, "healthy"); h.BehindSeconds != later.Unix()-(wm+60) || !h.Due {
		t.Errorf("healthy at +61s: behind %ds due %v, want %ds and due", h.BehindSeconds, h.Due, later.Unix()-(wm+60))
	}
}
