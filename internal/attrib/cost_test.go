package attrib_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/hunt-runner/hunt-runner/internal/attrib"
	"github.com/hunt-runner/hunt-runner/internal/chtest"
)

// RunCosts finds a hunt's runs by their query ids and comments, newest first, summing each run's
// statements (the SELECT and its findings insert) and leaving out other hunts, QueryStart rows and
// statements that are not a run's. The rows are in a table of the query log's shape: chDB keeps
// no system.query_log (docs/operations.md, "Attribution and cost").
func TestRunCostsOfAHunt(t *testing.T) {
	db := chtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ql := db.Name + ".query_log"
	if err := db.Conn.Exec(ctx, "CREATE TABLE "+ql+` (type Enum8('QueryStart' = 1, 'QueryFinish' = 2, 'ExceptionBeforeStart' = 3, 'ExceptionWhileProcessing' = 4),
		event_date Date, event_time DateTime, query_id String, log_comment String,
		read_rows UInt64, read_bytes UInt64, query_duration_ms UInt64, memory_usage Int64) ENGINE = MergeTree ORDER BY event_time`); err != nil {
		t.Fatal(err)
	}
	insert := func(typ string, ago int, queryID, comment string, bytes uint64) {
		t.Helper()
		if err := db.Conn.Exec(ctx, "INSERT INTO "+ql+" SELECT ?, toDate(now() - ?), now() - ?, ?, ?, 1, ?, 5, 100",
			typ, ago, ago, queryID, comment, bytes); err != nil {
			t.Fatal(err)
		}
	}
	fire := time.Now().UTC().Truncate(time.Hour)
	runs := []uuid.UUID{uuid.New(), uuid.New(), uuid.New()}
	for i, run := range runs {
		c := attrib.Comment{HuntID: "h", Fire: fire.Add(time.Duration(i) * time.Hour), RunID: run, Kind: attrib.Live}.String()
		ago := 600 - 100*i // runs[2] is the newest
		insert("QueryStart", ago, attrib.QueryID(run, ""), c, 0)
		insert("QueryFinish", ago, attrib.QueryID(run, ""), c, 1000)
		insert("QueryFinish", ago-1, attrib.QueryID(run, "findings-1"), c, 10)
	}
	other := uuid.New()
	insert("QueryFinish", 10, attrib.QueryID(other, ""), attrib.Comment{HuntID: "other", RunID: other, Kind: attrib.Live}.String(), 1)
	insert("QueryFinish", 10, "random-id", attrib.Comment{HuntID: "h", RunID: other, Kind: attrib.Live}.String(), 1)

	got, err := attrib.RunCosts(ctx, db.Conn, attrib.CostOptions{QueryLog: ql}, "h", 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].RunID != runs[2].String() || got[1].RunID != runs[1].String() {
		t.Fatalf("runs %+v, want the newest two, newest first", got)
	}
	for _, r := range got {
		if r.Statements != 2 || r.ReadBytes != 1010 || r.DurationMS != 10 || r.Kind != attrib.Live || r.PeakMemory != 100 {
			t.Errorf("run %+v, want its two statements summed", r)
		}
	}
	if got[0].Fire != fire.Add(2*time.Hour).Format(time.RFC3339) {
		t.Errorf("fire %s", got[0].Fire)
	}
}
