package chstore_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/hunt-runner/hunt-runner/chstore"
	"github.com/hunt-runner/hunt-runner/internal/chtest"
	"github.com/hunt-runner/hunt-runner/store/schema"
)

// settingsOf asks the server which consistency settings a statement of conn arrives with.
func settingsOf(t *testing.T, conn driver.Conn) string {
	t.Helper()
	var q, par, seq string
	if err := conn.QueryRow(context.Background(), "SELECT toString(getSetting('insert_quorum')), "+
		"toString(getSetting('insert_quorum_parallel')), toString(getSetting('select_sequential_consistency'))").Scan(&q, &par, &seq); err != nil {
		t.Fatal(err)
	}
	return "insert_quorum=" + q + " insert_quorum_parallel=" + par + " select_sequential_consistency=" + seq
}

// onCluster reports a run of make test-cluster: fresh databases and tables are replicated.
func onCluster() bool { return os.Getenv(chtest.EnvURL) != "" && os.Getenv(chtest.EnvCluster) != "" }

func TestDetectConsistencyOnEngine(t *testing.T) {
	ctx := context.Background()
	mode, topo, tables, engine := chstore.ConsistencySingleEndpoint, "single", chstore.TablesPlain, "ReplacingMergeTree"
	if onCluster() {
		mode, topo, tables, engine = chstore.ConsistencyQuorum, "replicated", chstore.TablesReplicated, "ReplicatedReplacingMergeTree"
	}
	empty := chtest.New(t)
	rep, err := chstore.DetectConsistency(ctx, empty.Conn, empty.Name)
	if err != nil {
		t.Fatal(err)
	}
	// No tables yet: the server's topology decides.
	if rep.Mode != mode || rep.Tables != chstore.TablesMissing || !strings.Contains(rep.Reason, "topology is "+topo) {
		t.Errorf("fresh database: %+v, want %s from topology %s", rep, mode, topo)
	}
	db := chtest.NewWithSchema(t)
	rep, err = chstore.DetectConsistency(ctx, db.Conn, db.Name)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Mode != mode || rep.Tables != tables ||
		rep.Engines[schema.TableLease] != engine || len(rep.Engines) != len(schema.TableNames()) {
		t.Errorf("schema: %+v, want %s for %s tables", rep, mode, tables)
	}
}

// Open puts the mode's settings on the connection, as the server sees them.
func TestOpenCarriesConsistencySettings(t *testing.T) {
	if onCluster() {
		t.Skip("make test-cluster's URL carries the quorum settings itself; TestOpenRefusesSeveralEndpointsWithoutQuorum covers the cluster")
	}
	db := chtest.NewWithSchema(t)
	ctx := context.Background()
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	open := func(o chstore.Options) (driver.Conn, chstore.ConsistencyReport, error) {
		o.URL, o.Database, o.ConnectTimeout = db.URL, db.Name, 10*time.Second
		conn, rep, err := chstore.OpenConsistent(ctx, o, log)
		if err == nil {
			t.Cleanup(func() { conn.Close() })
		}
		return conn, rep, err
	}
	for _, tc := range []struct {
		o    chstore.Options
		mode chstore.Consistency
		want string
	}{
		{chstore.Options{}, chstore.ConsistencySingleEndpoint, "insert_quorum=0 insert_quorum_parallel=true select_sequential_consistency=0"},
		{chstore.Options{Consistency: chstore.ConsistencyQuorum}, chstore.ConsistencyQuorum, "insert_quorum=auto insert_quorum_parallel=false select_sequential_consistency=1"},
		{chstore.Options{Consistency: chstore.ConsistencySequential}, chstore.ConsistencySequential, "insert_quorum=0 insert_quorum_parallel=true select_sequential_consistency=1"},
		// The hunts connection: no settings whatever the mode says.
		{chstore.Options{Consistency: chstore.ConsistencyQuorum, SkipConsistency: true}, "", "insert_quorum=0 insert_quorum_parallel=true select_sequential_consistency=0"},
	} {
		conn, rep, err := open(tc.o)
		if err != nil {
			t.Fatalf("%+v: %v", tc.o, err)
		}
		if rep.Mode != tc.mode {
			t.Errorf("%q: mode %q, want %q", tc.o.Consistency, rep.Mode, tc.mode)
		}
		if got := settingsOf(t, conn); got != tc.want {
			t.Errorf("%q (skip %t): the server sees %s, want %s", tc.o.Consistency, tc.o.SkipConsistency, got, tc.want)
		}
	}
	if !strings.Contains(logs.String(), "change nothing") {
		t.Errorf("quorum on plain tables was not warned about:\n%s", logs.String())
	}
}

// Several hosts in the URL: refused where nothing makes them agree, accepted with quorum.
func TestOpenRefusesSeveralEndpointsWithoutQuorum(t *testing.T) {
	db := chtest.NewWithSchema(t)
	u, err := url.Parse(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	// Two endpoints, the first (127.0.0.2:8123) closed so the driver moves on to the engine:
	// the check counts hosts. net/url takes a port on the last host only.
	u.Host = "127.0.0.2," + u.Host
	ctx := context.Background()
	o := chstore.Options{URL: u.String(), Database: db.Name, ConnectTimeout: 10 * time.Second}
	// Plain tables: auto is single-endpoint, which two hosts contradict. Replicated tables
	// (make test-cluster): auto is quorum, and sequential is what cannot be correct.
	refused, fix := chstore.ConsistencyAuto, "list one host"
	if onCluster() {
		refused, fix = chstore.ConsistencySequential, "use --consistency quorum"
	}
	o.Consistency = refused
	_, err = chstore.Open(ctx, o, nil)
	if !errors.Is(err, chstore.ErrConsistency) || !strings.Contains(err.Error(), fix) {
		t.Fatalf("%s with two hosts: %v, want ErrConsistency naming the fix %q", refused, err, fix)
	}
	for _, c := range []chstore.Consistency{chstore.ConsistencyQuorum, chstore.ConsistencyAuto} {
		if c == refused {
			continue
		}
		o.Consistency = c
		conn, rep, err := chstore.OpenConsistent(ctx, o, nil)
		if err != nil {
			t.Fatalf("%s with two hosts: %v", c, err)
		}
		conn.Close()
		if rep.Endpoints != 2 || rep.Mode != chstore.ConsistencyQuorum {
			t.Errorf("%s with two hosts: %+v, want quorum over 2 endpoints", c, rep)
		}
	}
}
