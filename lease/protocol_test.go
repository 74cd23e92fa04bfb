package lease

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/uuid"
)

// chunkStore delays or fails the claim insert of chosen statements (by call number, from 1).
type chunkStore struct {
	Store
	calls int
	slow  map[int]time.Duration
	fail  map[int]bool
}

func (s *chunkStore) InsertClaims(ctx context.Context, claims []Row, lease time.Duration) error {
	s.calls++
	if s.fail[s.calls] {
		return errors.New("connection reset")
	}
	err := s.Store.InsertClaims(ctx, claims, lease)
	time.Sleep(s.slow[s.calls])
	return err
}

// A batch larger than one statement is judged statement by statement: a late or failed
// statement costs only its own fires, and the error is reported beside the definite outcomes.
func TestClaimJudgesEachStatement(t *testing.T) {
	cases := []struct {
		name                    string
		slow                    map[int]time.Duration
		fail                    map[int]bool
		won, lost, failed, sent int
	}{
		{name: "all on time", won: 2500, sent: 2},
		{name: "second late", slow: map[int]time.Duration{2: simSettle}, won: 2000, lost: 500, sent: 2},
		{name: "first late", slow: map[int]time.Duration{1: simSettle}, won: 500, lost: 2000, sent: 2},
		{name: "first fails", fail: map[int]bool{1: true}, failed: 2500, sent: 1},
		{name: "second fails", fail: map[int]bool{2: true}, won: 2000, failed: 500, sent: 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w := &simWorld{p: simParams{replicas: 1, skew: []time.Duration{0}, lag: [][]time.Duration{{0}}}}
				st := &chunkStore{Store: &simClient{w: w, rng: rand.New(rand.NewPCG(1, 1))}, slow: tc.slow, fail: tc.fail}
				p := &protocol{store: st, owner: "pod-a", lease: simLease, settle: simSettle,
					log: slog.New(slog.NewTextHandler(io.Discard, nil)), newID: uuid.New}
				fires := make([]Fire, 2500)
				for i := range fires {
					fires[i] = Fire{HuntID: fmt.Sprintf("h-%04d", i), Fire: simFire}
				}
				res, err := p.claim(context.Background(), fires)
				if got := len(res.Won) + len(res.Lost) + len(res.AlreadyRun) + len(res.Failed); got != len(fires) {
					t.Fatalf("%d of %d fires accounted for", got, len(fires))
				}
				if len(res.Won) != tc.won || len(res.Lost) != tc.lost || len(res.Failed) != tc.failed || st.calls != tc.sent {
					t.Fatalf("won %d lost %d failed %d after %d statements; want %d %d %d after %d",
						len(res.Won), len(res.Lost), len(res.Failed), st.calls, tc.won, tc.lost, tc.failed, tc.sent)
				}
				// The call fails only when nothing got a definite outcome.
				if (err != nil) != (tc.failed == len(fires)) || (res.Err != nil) != (tc.failed > 0) {
					t.Fatalf("err %v, Result.Err %v", err, res.Err)
				}
			})
		})
	}
}
