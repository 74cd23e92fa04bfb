package lease_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/hunt-runner/hunt-runner/lease"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/hunt-runner/hunt-runner/internal/chlocal/ctl"
	"github.com/hunt-runner/hunt-runner/internal/chtest"
	"github.com/hunt-runner/hunt-runner/store/schema"
)

func TestOutcomeClasses(t *testing.T) {
	ex := func(code int32) error { return fmt.Errorf("wrapped: %w", &clickhouse.Exception{Code: code}) }
	for _, tc := range []struct {
		err                error
		refused, transient bool
	}{
		{ex(286), true, true},  // UNSATISFIED_QUORUM_FOR_PREVIOUS_WRITE
		{ex(252), true, true},  // TOO_MANY_PARTS
		{ex(319), false, true}, // UNKNOWN_STATUS_OF_INSERT: may have landed
		{ex(289), false, true}, // REPLICA_IS_NOT_IN_QUORUM
		{ex(159), false, true}, // TIMEOUT_EXCEEDED
		{ex(62), false, false}, // SYNTAX_ERROR: final
		{ex(60), false, false}, // UNKNOWN_TABLE: final
		{ex(469), false, false},
		{&net.OpError{Op: "dial", Err: errors.New("connection refused")}, false, true},
		{io.ErrUnexpectedEOF, false, true},
		{context.DeadlineExceeded, false, true},
		{context.Canceled, false, false},
		{fmt.Errorf("renew: %w", lease.ErrLost), false, false},
		{errors.New("lease lost during the run"), false, false},
	} {
		if got := lease.Refused(tc.err); got != tc.refused {
			t.Errorf("Refused(%v) = %v", tc.err, got)
		}
		if got := lease.Transient(tc.err); got != tc.transient {
			t.Errorf("Transient(%v) = %v", tc.err, got)
		}
	}
}

// A claim insert refused before executing (another quorum insert pending on hunt_lease: 286)
// is sent again after a jittered wait and wins; a definite error fails the batch.
func TestRefusedClaimIsRetried(t *testing.T) {
	srv := chtest.Start(t)
	db := srv.NewDB(t)
	if _, err := schema.Apply(context.Background(), db.Conn, db.Name, schema.TopologySingle, ""); err != nil {
		t.Fatal(err)
	}
	c := newCoord(t, db, "pod-a", time.Minute, 200*time.Millisecond)
	fire := serverNow(t, db) - 1
	srv.SetFaults(t, ctl.FaultRule{Name: "quorum", Kind: ctl.KindInsert, Match: "arrayZip", Times: 2,
		Effect: ctl.FailBefore, Code: 286})
	// A claim acknowledged past the settle on a loaded machine is lost: claim again, for as long
	// as it takes, never assuming the first claim (or the fifth) wins.
	won := chtest.Poll(3*time.Minute, func() bool {
		res, err := c.Claim(context.Background(), []lease.Fire{{HuntID: "h", Fire: fire}})
		if err != nil || len(res.Failed) > 0 {
			t.Fatalf("claim refused twice before executing: %+v, %v; want it retried", res, err)
		}
		if len(res.Won) == 1 {
			return true
		}
		waitServerPast(t, db, time.Now().Add(3*time.Second)) // the lost claim's provisional row expires
		return false
	})
	if !won {
		t.Fatal("the claim never won")
	}
	if st := srv.FaultStats(t); st[0].Fired != 2 {
		t.Fatalf("the refusal fired %d times, want 2", st[0].Fired)
	}
}
