package runner

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hunt-runner/hunt-runner/configsrc"
	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/status"
	"github.com/hunt-runner/hunt-runner/store"
)

// exceptionsQuery gives every event a user (its host) and an address, so that exceptions can
// match by value, by range and with a where:.
const exceptionsQuery = "SELECT host AS user, n, toIPv4(concat('10.0.0.', toString(n % 5))) AS ip FROM events " +
	"WHERE ts >= {window_start:DateTime64(3)} AND ts < {window_end:DateTime64(3)}"

// Done when (#27): a hunt whose findings include a user covered by a live exception commits
// none for that user and all the others; the run records each exception's hits and status shows
// them; once the exception's until has passed, the next fire commits the user's findings again,
// with the same definition loaded (no reload, no restart).
func TestExceptionsExcludeFindingsUntilTheyExpire(t *testing.T) {
	e := newEnv(t)
	h := hunt.Hunt{ID: "logins", Interval: 600 * time.Second, Offset: sec(e.mid(600)), Enabled: true,
		Query: exceptionsQuery, MaxFindings: hunt.MaxFindingsCeiling}
	fire1 := e.latest(h)
	h.Exceptions = []hunt.Exception{
		{ID: "exceptions#1", Match: []hunt.ExceptionMatch{{Column: "user", Values: []string{"host-3"}}},
			Until: time.Unix(fire1+300, 0).UTC(), Owner: "secops@corp", Reason: "host-3 is the backup server"},
		{ID: "corp-scanners#1", List: "corp-scanners", Match: []hunt.ExceptionMatch{{Column: "ip", Ranges: []string{"10.0.0.4/32"}}},
			Where: "n % 2 = 0", Until: time.Unix(fire1+86400, 0).UTC(), Owner: "netops@corp", Reason: "the scanner"},
	}
	set := hunt.NewSet([]hunt.Hunt{h}, "test", "")
	hp, _ := set.Get("logins")
	h = *hp
	clock := atomic.Int64{}
	clock.Store(e.now)
	r := e.runner("pod-a", set, func(o *Options) {
		o.ScheduleClock = func(time.Time) time.Time { return time.Unix(clock.Load(), 0) }
	})
	e.tickAndWait(r)
	if wm, _ := e.watermarkOf("logins"); wm != fire1 {
		t.Fatalf("watermark %d, want the fire %d committed", wm, fire1)
	}

	window := func(fire int64) string {
		return fmt.Sprintf("toUnixTimestamp64Milli(ts) >= %d AND toUnixTimestamp64Milli(ts) < %d", (fire-600)*1000, fire*1000)
	}
	committed := func(fire int64, where string) uint64 {
		return e.count(fmt.Sprintf("SELECT count() FROM hunt_findings_committed WHERE hunt_id = 'logins' AND fire = toDateTime(%d) AND %s", fire, where))
	}
	scanner := "n % 5 = 4 AND n % 2 = 0"
	all := e.count("SELECT count() FROM events WHERE " + window(fire1))
	user3 := e.count("SELECT count() FROM events WHERE host = 'host-3' AND " + window(fire1))
	scanned := e.count("SELECT count() FROM events WHERE host != 'host-3' AND " + scanner + " AND " + window(fire1))
	if user3 == 0 || scanned == 0 {
		t.Fatal("fixture: no rows for an exception in the window")
	}
	if got := committed(fire1, "JSONExtractString(finding, 'user') = 'host-3'"); got != 0 {
		t.Errorf("fire 1: %d findings of host-3 committed, want none (live exception)", got)
	}
	if got := committed(fire1, "JSONExtractString(finding, 'ip') = '10.0.0.4' AND JSONExtractUInt(finding, 'n') % 2 = 0"); got != 0 {
		t.Errorf("fire 1: %d findings the range and where: exclude committed, want none", got)
	}
	if got, want := committed(fire1, "1"), all-user3-scanned; got != want {
		t.Errorf("fire 1: %d findings committed, want every other row: %d", got, want)
	}
	hits := func(fire int64) map[string]uint64 {
		var m map[string]uint64
		e.scan(&m, fmt.Sprintf("SELECT exception_hits FROM hunt_runs WHERE hunt_id = 'logins' AND status = 'succeeded' AND fire = toDateTime(%d)", fire))
		return m
	}
	if got := hits(fire1); got["exceptions#1"] != user3 || got["corp-scanners#1"] != scanned || len(got) != 2 {
		t.Errorf("fire 1 hits %v, want exceptions#1=%d corp-scanners#1=%d", got, user3, scanned)
	}

	// status shows each exception with its owner, reason, expiry and hits.
	rep, err := status.Read(e.ctx, store.New(e.db.Conn, e.db.Name), []hunt.Hunt{h})
	if err != nil {
		t.Fatal(err)
	}
	sh, _ := rep.Get("logins")
	if len(sh.Exceptions) != 2 || sh.Exceptions[0].Hits != user3 || sh.Exceptions[0].Owner != "secops@corp" ||
		sh.Exceptions[0].Until != time.Unix(fire1+300, 0).UTC().Format(time.RFC3339) || sh.Exceptions[1].Hits != scanned {
		t.Errorf("status exceptions %+v, want hits %d and %d with owner and until", sh.Exceptions, user3, scanned)
	}

	// The next fire is past the first exception's until: host-3's findings are committed
	// again by the same runner with the same set; the scanner exception still applies.
	clock.Add(600)
	e.tickAndWait(r)
	fire2 := fire1 + 600
	if wm, _ := e.watermarkOf("logins"); wm != fire2 {
		t.Fatalf("watermark %d, want the next fire %d committed", wm, fire2)
	}
	user3 = e.count("SELECT count() FROM events WHERE host = 'host-3' AND NOT (" + scanner + ") AND " + window(fire2))
	if got := committed(fire2, "JSONExtractString(finding, 'user') = 'host-3'"); got != user3 || got == 0 {
		t.Errorf("fire 2: %d findings of host-3 committed, want %d (its exception expired)", got, user3)
	}
	scanned = e.count("SELECT count() FROM events WHERE " + scanner + " AND " + window(fire2))
	if got := hits(fire2); got["exceptions#1"] != 0 || got["corp-scanners#1"] != scanned {
		t.Errorf("fire 2 hits %v, want only corp-scanners#1=%d", got, scanned)
	}
	rep, err = status.Read(e.ctx, store.New(e.db.Conn, e.db.Name), []hunt.Hunt{h})
	if err != nil {
		t.Fatal(err)
	}
	if sh, _ := rep.Get("logins"); !sh.Exceptions[0].Expired || sh.Exceptions[1].Expired {
		t.Errorf("status after fire 2: %+v, want the first exception expired and the second live", sh.Exceptions)
	}
}

// A hunt with no live exception sends exactly the statement it sent before exceptions
// existed, and a retry of a fire sends the same statement as its first attempt.
func TestExceptionStatementOnlyWhenLive(t *testing.T) {
	e := newEnv(t)
	r := e.runner("pod-a", nil, nil)
	h := hunt.Hunt{ID: "x", Interval: 600 * time.Second, Query: eventsQuery, MaxFindings: 10,
		Exceptions: []hunt.Exception{{ID: "exceptions#1", Match: []hunt.ExceptionMatch{{Column: "host", Values: []string{"a'b"}}},
			Until: time.Unix(2000, 0), Owner: "o", Reason: "r"}}}
	w := window{DataStart: time.Unix(0, 0), DataEnd: time.Unix(600, 0)}
	after, params, _ := r.statement(&h, 2000, [16]byte{}, w, "live")
	if after != configsrc.FindingsQuery(h.Query) || params[configsrc.ParamLimit] != "11" {
		t.Fatalf("a fire at the exception's until sends\n%s\nwith limit %s; want FindingsQuery unchanged", after, params[configsrc.ParamLimit])
	}
	before, params, _ := r.statement(&h, 1999, [16]byte{}, w, "live")
	again, _, _ := r.statement(&h, 1999, [16]byte{}, w, "live")
	if before != again || before == after || params[configsrc.ParamLimit] != "12" {
		t.Fatalf("a live exception: statement changed between attempts or not applied (limit %s)", params[configsrc.ParamLimit])
	}
	if strings.Contains(before, "a'b") || params["hr_x1_1_v"] != `['a\'b']` {
		t.Fatalf("the value is not bound as a parameter: %v", params)
	}
}
