package status

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/store"
)

// status --json shows each hunt's live revision: the definition digest and the git commit.
func TestStatusShowsLiveRevision(t *testing.T) {
	h := hunt.NewSet([]hunt.Hunt{{ID: "a", Interval: time.Minute, Enabled: true, Query: "SELECT 1"}}, "test", "c0ffee").Hunts[0]
	got := build(store.Snapshot{Now: time.Unix(1700000000, 0)}, h, false, publishedEntry{}, store.RunSummary{}, nil)
	b, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	want := h.Hash[:hunt.RevisionDigestLen] + "@c0ffee"
	if got.Revision != want || !strings.Contains(string(b), `"revision":"`+want+`"`) {
		t.Fatalf("revision %q, want %q", got.Revision, want)
	}
}
