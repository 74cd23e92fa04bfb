package notify

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/internal/chtest"
)

// Environment of the child process TestSIGKILLedDispatcherDeliveryCompletedByPeer starts.
const (
	childDB   = "HUNT_RUNNER_NOTIFY_CHILD_DB"
	childCH   = "HUNT_RUNNER_NOTIFY_CHILD_CH"
	childSink = "HUNT_RUNNER_NOTIFY_CHILD_SINK"
)

// A Dispatcher in another process is SIGKILLed while its request is out: no code of it runs
// after the signal, its lease stays in hunt_delivery, and a peer completes the delivery once
// that lease has expired, with the same idempotency key.
func TestSIGKILLedDispatcherDeliveryCompletedByPeer(t *testing.T) {
	if os.Getenv(childDB) != "" {
		t.Skip("running as the child")
	}
	db := testDB(t)
	recv := newReceiver(t)
	recv.hold = make(chan struct{})
	recv.arrived = make(chan string, 10)
	fire := baseFire()
	commit(t, db, "brute", fire, `{"host":"a"}`)

	child := exec.Command(os.Args[0], "-test.run=^TestDispatcherChildProcess$", "-test.v")
	child.Env = append(os.Environ(), childDB+"="+db.Name, childCH+"="+db.URL, childSink+"="+recv.URL)
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	var first string
	select {
	case first = <-recv.arrived:
	case <-time.After(60 * time.Second):
		_ = child.Process.Kill()
		t.Fatal("the child never sent")
	}
	if err := child.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	_ = child.Wait()

	k := dk("brute", fire.Unix(), "soc")
	if d := deliveryRows(t, db)[k]; d.Status != StatusDelivering || d.Owner != "pod-killed" {
		t.Fatalf("after SIGKILL: %+v, want delivering by pod-killed", d)
	}
	_, leaseUntil := claimOf(t, db, "brute", "soc")
	close(recv.hold)
	peer := newDispatcher(t, db, []hunt.Hunt{{ID: "brute"}}, testOptions(db, webhookConfig(recv.URL, nil), "pod-peer"))
	stop := run(t, peer)
	chtest.Eventually(t, 30*time.Second, "the peer's delivery", func() bool { return len(recv.ok(t)) == 1 })
	stop()
	if got := recv.ok(t)[0].IdempotencyKey; got != first {
		t.Errorf("peer sent key %s, the killed process %s", got, first)
	}
	var claimed time.Time
	if err := db.Conn.QueryRow(context.Background(), "SELECT min(updated) FROM "+db.Name+".hunt_delivery WHERE owner = 'pod-peer' AND status = 'delivering'").Scan(&claimed); err != nil {
		t.Fatal(err)
	}
	if claimed.Before(leaseUntil) {
		t.Errorf("the peer claimed at %s, inside the killed process's lease (until %s)", claimed, leaseUntil)
	}
}

// TestDispatcherChildProcess is the Dispatcher the test above kills; it runs only as that
// child process.
func TestDispatcherChildProcess(t *testing.T) {
	name := os.Getenv(childDB)
	if name == "" {
		t.Skip("child process of TestSIGKILLedDispatcherDeliveryCompletedByPeer")
	}
	opts, err := chtest.Options(os.Getenv(childCH), name)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := clickhouse.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	db := &chtest.DB{Conn: conn, Name: name}
	o := testOptions(db, webhookConfig(os.Getenv(childSink), nil), "pod-killed")
	o.Lease = 2 * time.Second
	d := newDispatcher(t, db, []hunt.Hunt{{ID: "brute"}}, o)
	_ = d.Start(context.Background()) // until SIGKILL
}
