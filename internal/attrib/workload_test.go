package attrib_test

import (
	"context"
	"strings"
	"testing"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/hunt-runner/hunt-runner/internal/attrib"
)

// Each kind gets its class: test shares preview's; coordination and estimates get none, and
// an unset class sends no setting at all.
func TestWorkloadsByKind(t *testing.T) {
	w := attrib.Workloads{Live: "l", Backfill: "b", Preview: "p"}
	for k, want := range map[attrib.Kind]string{attrib.Live: "l", attrib.Backfill: "b", attrib.Preview: "p", attrib.Test: "p",
		attrib.Coordination: "", attrib.Estimate: ""} {
		s := clickhouse.Settings{}
		w.Apply(s, k)
		if got, _ := s[attrib.WorkloadSetting].(string); got != want || (want == "") != (len(s) == 0) {
			t.Errorf("kind %s: settings %v, want workload %q", k, s, want)
		}
	}
	s := clickhouse.Settings{}
	attrib.Workloads{}.Apply(s, attrib.Live)
	if len(s) != 0 {
		t.Errorf("no class set, settings %v", s)
	}
	if err := attrib.CheckWorkloads(context.Background(), nil, attrib.Workloads{}); err != nil {
		t.Errorf("no class set: %v (the check must not even ask the server)", err)
	}
}

// A class name that is not a plain identifier is refused before the server is asked, naming
// the flag: the CREATE WORKLOAD a refusal suggests must be pasteable as it is.
func TestWorkloadNameRefused(t *testing.T) {
	err := attrib.CheckWorkloads(context.Background(), nil, attrib.Workloads{Backfill: "bulk; DROP"})
	if err == nil || !strings.Contains(err.Error(), `--workload-backfill "bulk; DROP"`) {
		t.Fatalf("bad name: %v", err)
	}
}
