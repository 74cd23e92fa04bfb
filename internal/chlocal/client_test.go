package chlocal_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/google/uuid"

	"github.com/hunt-runner/hunt-runner/internal/chtest"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func TestPingAndServerVersion(t *testing.T) {
	db := chtest.New(t)
	ctx := ctxT(t)
	if err := db.Conn.Ping(ctx); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	v, err := db.Conn.ServerVersion()
	if err != nil {
		t.Fatalf("ServerVersion: %v", err)
	}
	// chlocal must report the pinned chDB version; a real server may run any supported one.
	if (os.Getenv(chtest.EnvURL) == "" && v.Version.Major != 26) || v.Revision < 54454 {
		t.Fatalf("ServerVersion = %v, want ClickHouse 26.x (chlocal) with a revision >= 54454", v)
	}
	resp, err := http.Get(strings.TrimSuffix(db.URL, "/") + "/ping")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	buf := make([]byte, 16)
	n, _ := resp.Body.Read(buf)
	if resp.StatusCode != 200 || string(buf[:n]) != "Ok.\n" {
		t.Fatalf("/ping = %d %q, want 200 \"Ok.\\n\"", resp.StatusCode, buf[:n])
	}
}

func TestDDLAndPositionalBinds(t *testing.T) {
	db := chtest.New(t)
	ctx := ctxT(t)
	if err := db.Conn.Exec(ctx, `CREATE TABLE kv (k UInt32, v String, ts DateTime64(3, 'UTC'))
		ENGINE = ReplacingMergeTree(ts) ORDER BY k`); err != nil {
		t.Fatalf("create: %v", err)
	}
	tricky := "it's a \"test\"\nwith\ttabs and \\ backslash"
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 678e6, time.UTC)
	// A time.Time bound with ? is rendered with whole seconds by the client
	// (on a real server too), so the sub-second value travels as text.
	const ms = "2006-01-02 15:04:05.000"
	if err := db.Conn.Exec(ctx, "INSERT INTO kv VALUES (?, ?, ?), (?, ?, ?)", 1, "old", t0.Format(ms), 1, tricky, t0.Add(time.Second).Format(ms)); err != nil {
		t.Fatalf("insert: %v", err)
	}
	var v string
	var ts time.Time
	if err := db.Conn.QueryRow(ctx, "SELECT v, ts FROM kv FINAL WHERE k = ?", 1).Scan(&v, &ts); err != nil {
		t.Fatalf("select: %v", err)
	}
	if v != tricky || !ts.Equal(t0.Add(time.Second)) {
		t.Fatalf("got (%q, %v), want (%q, %v)", v, ts, tricky, t0.Add(time.Second))
	}
	var exists uint8
	if err := db.Conn.QueryRow(ctx, "EXISTS TABLE kv").Scan(&exists); err != nil || exists != 1 {
		t.Fatalf("EXISTS TABLE kv = %d, %v", exists, err)
	}
	if err := db.Conn.Exec(ctx, "DROP TABLE kv SYNC"); err != nil {
		t.Fatalf("drop: %v", err)
	}
	if err := db.Conn.QueryRow(ctx, "EXISTS TABLE kv").Scan(&exists); err != nil || exists != 0 {
		t.Fatalf("after DROP, EXISTS TABLE kv = %d, %v", exists, err)
	}
}

func TestServerSideParameters(t *testing.T) {
	db := chtest.New(t)
	ctx := ctxT(t)
	if err := db.Conn.Exec(ctx, "CREATE TABLE p (id UInt32, s String, ts DateTime64(3, 'UTC')) ENGINE = MergeTree ORDER BY id"); err != nil {
		t.Fatal(err)
	}
	if err := db.Conn.Exec(ctx, "INSERT INTO p VALUES (1, 'a', '2026-01-01 00:00:00.000'), (2, 'b\\0c', '2026-01-01 00:00:01.500'), (3, 'c', '2026-01-01 00:00:02.000')"); err != nil {
		t.Fatal(err)
	}
	pctx := clickhouse.Context(ctx, clickhouse.WithParameters(clickhouse.Parameters{
		"min": "2",
		"s":   "b\x00c",
		"ts":  "2026-01-01 00:00:01.500",
	}))
	var id uint32
	if err := db.Conn.QueryRow(pctx, "SELECT id FROM p WHERE id >= {min:UInt32} AND s = {s:String} AND ts = {ts:DateTime64(3, 'UTC')}").Scan(&id); err != nil {
		t.Fatalf("WithParameters: %v", err)
	}
	if id != 2 {
		t.Fatalf("id = %d, want 2", id)
	}
	var n uint64
	if err := db.Conn.QueryRow(ctx, "SELECT count() FROM p WHERE s = {s:String}", clickhouse.Named("s", "c")).Scan(&n); err != nil {
		t.Fatalf("Named: %v", err)
	}
	if n != 1 {
		t.Fatalf("count = %d, want 1", n)
	}
	// Server-side parameters also work for DDL-free writes.
	wctx := clickhouse.Context(ctx, clickhouse.WithParameters(clickhouse.Parameters{"id": "9", "s": "x'y"}))
	if err := db.Conn.Exec(wctx, "INSERT INTO p SELECT {id:UInt32}, {s:String}, now64(3)"); err != nil {
		t.Fatalf("INSERT … SELECT with parameters: %v", err)
	}
	var s string
	if err := db.Conn.QueryRow(ctx, "SELECT s FROM p WHERE id = 9").Scan(&s); err != nil || s != "x'y" {
		t.Fatalf("s = %q, %v; want x'y", s, err)
	}
}

func TestBatchInsert100k(t *testing.T) {
	db := chtest.New(t)
	ctx := ctxT(t)
	if err := db.Conn.Exec(ctx, "CREATE TABLE big (id UInt64, s String) ENGINE = MergeTree ORDER BY id"); err != nil {
		t.Fatal(err)
	}
	const rows = 100_000
	batch, err := db.Conn.PrepareBatch(ctx, "INSERT INTO big")
	if err != nil {
		t.Fatal(err)
	}
	for i := range rows {
		// NUL bytes and varied lengths make the Native body binary.
		if err := batch.Append(uint64(i), fmt.Sprintf("row-%d\x00%s", i, strings.Repeat("x", i%13))); err != nil {
			t.Fatal(err)
		}
	}
	if err := batch.Send(); err != nil {
		t.Fatalf("send: %v", err)
	}
	rs, err := db.Conn.Query(ctx, "SELECT id, s FROM big ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	next := uint64(0)
	for rs.Next() {
		var id uint64
		var s string
		if err := rs.Scan(&id, &s); err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("row-%d\x00%s", next, strings.Repeat("x", int(next)%13))
		if id != next || s != want {
			t.Fatalf("row %d = (%d, %q), want (%d, %q)", next, id, s, next, want)
		}
		next++
	}
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}
	if next != rows {
		t.Fatalf("read back %d rows, want %d", next, rows)
	}
}

// TestSchemaColumnTypes round-trips every column type docs/contracts.md uses,
// through a batch (Native body) and through positional binds.
func TestSchemaColumnTypes(t *testing.T) {
	db := chtest.New(t)
	ctx := ctxT(t)
	if err := db.Conn.Exec(ctx, `CREATE TABLE types (
		s String, u8 UInt8, u32 UInt32, u64 UInt64,
		dt DateTime('UTC'), dt3 DateTime64(3, 'UTC'), dt6 DateTime64(6, 'UTC'),
		id UUID, lc LowCardinality(String), m Map(String, String)
	) ENGINE = MergeTree ORDER BY u32`); err != nil {
		t.Fatal(err)
	}
	type row struct {
		S   string            `ch:"s"`
		U8  uint8             `ch:"u8"`
		U32 uint32            `ch:"u32"`
		U64 uint64            `ch:"u64"`
		DT  time.Time         `ch:"dt"`
		DT3 time.Time         `ch:"dt3"`
		DT6 time.Time         `ch:"dt6"`
		ID  uuid.UUID         `ch:"id"`
		LC  string            `ch:"lc"`
		M   map[string]string `ch:"m"`
	}
	base := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	want := []row{
		{"", 0, 1, 0, base, base.Add(123 * time.Millisecond), base.Add(123456 * time.Microsecond), uuid.Nil, "", map[string]string{}},
		{"ünïcode\n", 255, 2, 1<<64 - 1, base.Add(time.Hour), base.Add(999 * time.Millisecond), base.Add(999999 * time.Microsecond), uuid.MustParse("0195f3c2-7d11-7a3e-9b5c-3f1d2e4a5b6c"), "failed", map[string]string{"team": "sec", "k'ey": "v\"al"}},
	}
	batch, err := db.Conn.PrepareBatch(ctx, "INSERT INTO types")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range want {
		if err := batch.AppendStruct(&r); err != nil {
			t.Fatal(err)
		}
	}
	if err := batch.Send(); err != nil {
		t.Fatalf("send: %v", err)
	}
	third := row{"bind", 7, 3, 42, base.Add(2 * time.Hour), base.Add(5 * time.Millisecond), base.Add(7 * time.Microsecond), uuid.MustParse("123e4567-e89b-12d3-a456-426614174000"), "lost", map[string]string{"a": "b"}}
	if err := db.Conn.Exec(ctx, "INSERT INTO types VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
		third.S, third.U8, third.U32, third.U64, third.DT,
		third.DT3.Format("2006-01-02 15:04:05.000"), third.DT6.Format("2006-01-02 15:04:05.000000"), // ? renders time.Time in whole seconds
		third.ID, third.LC, third.M); err != nil {
		t.Fatalf("insert with binds: %v", err)
	}
	want = append(want, third)
	var got []row
	if err := db.Conn.Select(ctx, &got, "SELECT * FROM types ORDER BY u32"); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("got %d rows, want %d", len(got), len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.S != w.S || g.U8 != w.U8 || g.U32 != w.U32 || g.U64 != w.U64 || !g.DT.Equal(w.DT) ||
			!g.DT3.Equal(w.DT3) || !g.DT6.Equal(w.DT6) || g.ID != w.ID || g.LC != w.LC || fmt.Sprint(g.M) != fmt.Sprint(w.M) {
			t.Errorf("row %d:\n got %+v\nwant %+v", i, g, w)
		}
	}
}

func TestErrorsAreExceptions(t *testing.T) {
	db := chtest.New(t)
	ctx := ctxT(t)
	for _, tc := range []struct {
		name, sql string
		code      int32
		codeName  string
	}{
		{"syntax", "SELEC 1", 62, "SYNTAX_ERROR"},
		{"unknown table", "SELECT * FROM no_such_table", 60, "UNKNOWN_TABLE"},
		{"unknown function", "SELECT no_such_function(1)", 46, "UNKNOWN_FUNCTION"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, run := range []struct {
				how string
				do  func() error
			}{
				{"Query", func() error {
					rs, err := db.Conn.Query(ctx, tc.sql)
					if err == nil {
						rs.Close()
					}
					return err
				}},
				{"Exec", func() error { return db.Conn.Exec(ctx, tc.sql) }},
			} {
				err := run.do()
				var ex *clickhouse.Exception
				if !errors.As(err, &ex) {
					t.Fatalf("%s: error %v (%T) is not a *clickhouse.Exception", run.how, err, err)
				}
				if ex.Code != tc.code || ex.Name != "DB::Exception" || !strings.Contains(ex.Message, tc.codeName) {
					t.Fatalf("%s: exception %+v, want code %d (%s)", run.how, ex, tc.code, tc.codeName)
				}
			}
		})
	}
}

func TestMultiBlockAndEmptyResults(t *testing.T) {
	db := chtest.New(t)
	ctx := ctxT(t)
	const n = 200_000
	bctx := clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{"max_block_size": 8192}))
	rs, err := db.Conn.Query(bctx, "SELECT number, toString(number) FROM numbers(?)", n)
	if err != nil {
		t.Fatal(err)
	}
	var count, sum uint64
	for rs.Next() {
		var v uint64
		var s string
		if err := rs.Scan(&v, &s); err != nil {
			t.Fatal(err)
		}
		if s != strconv.FormatUint(v, 10) {
			t.Fatalf("row %d: %q", v, s)
		}
		count++
		sum += v
	}
	rs.Close()
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}
	if count != n || sum != n*(n-1)/2 {
		t.Fatalf("read %d rows with sum %d, want %d and %d", count, sum, n, n*(n-1)/2)
	}

	rs, err = db.Conn.Query(ctx, "SELECT number FROM numbers(10) WHERE number > 100")
	if err != nil {
		t.Fatal(err)
	}
	if rs.Next() {
		t.Fatal("empty result returned a row")
	}
	rs.Close()
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}
}

// TestCompression runs an insert and multi-block reads with every
// compression the client offers. One LZ4 failure mode was silent (zero rows),
// so row counts are asserted.
func TestCompression(t *testing.T) {
	db := chtest.New(t)
	ctx := ctxT(t)
	if err := db.Conn.Exec(ctx, "CREATE TABLE c (id UInt64, s String, d IntervalDay) ENGINE = Memory"); err != nil {
		t.Fatal(err)
	}
	for _, m := range []clickhouse.CompressionMethod{clickhouse.CompressionLZ4, clickhouse.CompressionZSTD, clickhouse.CompressionGZIP, clickhouse.CompressionDeflate} {
		t.Run(m.String(), func(t *testing.T) {
			opts := *db.Options
			opts.Compression = &clickhouse.Compression{Method: m}
			conn, err := clickhouse.Open(&opts)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			const rows = 30_000
			batch, err := conn.PrepareBatch(ctx, "INSERT INTO c (id, s)")
			if err != nil {
				t.Fatal(err)
			}
			for i := range rows {
				if err := batch.Append(uint64(i), m.String()+strings.Repeat("z", i%50)); err != nil {
					t.Fatal(err)
				}
			}
			if err := batch.Send(); err != nil {
				t.Fatalf("send: %v", err)
			}
			var n uint64
			if err := conn.QueryRow(ctx, "SELECT count() FROM c WHERE startsWith(s, ?)", m.String()).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n != rows {
				t.Fatalf("count = %d, want %d", n, rows)
			}
			bctx := clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{"max_block_size": 4096}))
			rs, err := conn.Query(bctx, "SELECT id, s, d FROM c WHERE startsWith(s, ?) ORDER BY id", m.String())
			if err != nil {
				t.Fatal(err)
			}
			var got int
			for rs.Next() {
				var id uint64
				var s string
				var d string // IntervalDay: re-encoding it was lossy in an earlier design
				if err := rs.Scan(&id, &s, &d); err != nil {
					t.Fatal(err)
				}
				if id != uint64(got) || d != "0 Day" {
					t.Fatalf("row %d = (%d, %q)", got, id, d)
				}
				got++
			}
			rs.Close()
			if err := rs.Err(); err != nil {
				t.Fatal(err)
			}
			if got != rows {
				t.Fatalf("scanned %d rows, want %d", got, rows)
			}
			var ex *clickhouse.Exception
			if err := conn.Exec(ctx, "SELEC 1"); !errors.As(err, &ex) || ex.Code != 62 {
				t.Fatalf("syntax error with %s: %v", m, err)
			}
		})
	}
}

func TestReplicatedRewrite(t *testing.T) {
	db := chtest.New(t)
	if os.Getenv(chtest.EnvURL) != "" {
		t.Skip("the rewrite is chlocal's; a real server runs the cluster DDL itself")
	}
	ctx := ctxT(t)
	ddl := fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s.lease ON CLUSTER '{cluster}' (
		hunt_id String, owner String, ts DateTime64(6, 'UTC')
	) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/%s/lease', '{replica}', ts)
	ORDER BY hunt_id`, db.Name, db.Name)
	if err := db.Conn.Exec(ctx, ddl); err != nil {
		t.Fatalf("replicated DDL: %v", err)
	}
	if err := db.Conn.Exec(ctx, "ALTER TABLE lease ON CLUSTER '{cluster}' ADD COLUMN IF NOT EXISTS note String"); err != nil {
		t.Fatalf("ALTER ON CLUSTER: %v", err)
	}
	if err := db.Conn.Exec(ctx, "CREATE TABLE plain ON CLUSTER main (a UInt8) ENGINE = ReplicatedMergeTree ORDER BY a"); err != nil {
		t.Fatalf("bare ReplicatedMergeTree: %v", err)
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if err := db.Conn.Exec(ctx, "INSERT INTO lease (hunt_id, owner, ts) VALUES (?, ?, ?), (?, ?, ?)", "h", "a", t0, "h", "b", t0.Add(time.Second)); err != nil {
		t.Fatalf("insert: %v", err)
	}
	var owner, engine string
	if err := db.Conn.QueryRow(ctx, "SELECT owner FROM lease FINAL WHERE hunt_id = 'h'").Scan(&owner); err != nil {
		t.Fatal(err)
	}
	if owner != "b" {
		t.Fatalf("FINAL owner = %q, want b (newest ts)", owner)
	}
	if err := db.Conn.QueryRow(ctx, "SELECT engine FROM system.tables WHERE database = currentDatabase() AND name = 'lease'").Scan(&engine); err != nil {
		t.Fatal(err)
	}
	if engine != "ReplacingMergeTree" {
		t.Fatalf("engine = %q, want ReplacingMergeTree", engine)
	}
	if err := db.Conn.Exec(ctx, "DROP TABLE lease ON CLUSTER '{cluster}' SYNC"); err != nil {
		t.Fatalf("DROP ON CLUSTER: %v", err)
	}
}

// TestSettingsRestoredAfterRequest checks that per-query and connection
// settings apply to their request only, and that chDB's defaults were
// replaced by clickhouse-server's.
func TestSettingsRestoredAfterRequest(t *testing.T) {
	db := chtest.New(t)
	ctx := ctxT(t)
	setting := func(ctx context.Context, conn driver.Conn, name string) string {
		t.Helper()
		var v string
		if err := conn.QueryRow(ctx, "SELECT value FROM system.settings WHERE name = ?", name).Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	for name, want := range map[string]string{"async_insert": "0", "mutations_sync": "0", "date_time_input_format": "basic", "implicit_select": "0"} {
		if got := setting(ctx, db.Conn, name); got != want {
			t.Errorf("%s = %q, want the server default %q", name, got, want)
		}
	}
	sctx := clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{"date_time_input_format": "best_effort", "max_threads": 3}))
	if got := setting(sctx, db.Conn, "date_time_input_format"); got != "best_effort" {
		t.Fatalf("with the setting: %q, want best_effort", got)
	}
	if got := setting(sctx, db.Conn, "max_threads"); got != "3" {
		t.Fatalf("with the setting: max_threads %q, want 3", got)
	}
	if got := setting(ctx, db.Conn, "date_time_input_format"); got != "basic" {
		t.Fatalf("after the request: %q, want basic", got)
	}
	if got := setting(ctx, db.Conn, "max_threads"); got == "3" {
		t.Fatalf("after the request: max_threads still 3")
	}
	opts := *db.Options
	opts.Settings = clickhouse.Settings{"mutations_sync": 2}
	conn, err := clickhouse.Open(&opts)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if got := setting(ctx, conn, "mutations_sync"); got != "2" {
		t.Fatalf("connection setting: %q, want 2", got)
	}
	if got := setting(ctx, db.Conn, "mutations_sync"); got != "0" {
		t.Fatalf("another connection sees mutations_sync %q, want 0", got)
	}
	err = db.Conn.Exec(clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{"no_such_setting_x": 1})), "SELECT 1")
	var ex *clickhouse.Exception
	if !errors.As(err, &ex) || ex.Code != 115 {
		t.Fatalf("unknown setting: %v, want code 115", err)
	}
	// A readonly request must not leave the shared session refusing the next request's
	// settings: on a server every request starts afresh.
	for i, st := range []clickhouse.Settings{{"readonly": 1}, {"readonly": 2}, {"readonly": 1}, {"readonly": 1, "max_threads": 2}, {"max_threads": 3}, nil} {
		if err := db.Conn.Exec(clickhouse.Context(ctx, clickhouse.WithSettings(st)), "SELECT 1"); err != nil {
			t.Fatalf("request %d with %v after a readonly one: %v", i, st, err)
		}
	}
	if got := setting(ctx, db.Conn, "readonly"); got != "0" {
		t.Fatalf("readonly = %q after the readonly requests, want 0", got)
	}
	if err := db.Conn.Exec(ctx, "CREATE TABLE after_readonly (a UInt8) ENGINE = Memory"); err != nil {
		t.Fatalf("a write after the readonly requests: %v", err)
	}
}

// TestConcurrentClientProcesses runs 4 client processes (this test binary,
// re-executed), each writing batches and reading counts back.
func TestConcurrentClientProcesses(t *testing.T) {
	db := chtest.New(t)
	ctx := ctxT(t)
	if err := db.Conn.Exec(ctx, "CREATE TABLE events (proc UInt8, seq UInt32, payload String) ENGINE = MergeTree ORDER BY (proc, seq)"); err != nil {
		t.Fatal(err)
	}
	const procs, rounds, perBatch = 4, 20, 100
	var wg sync.WaitGroup
	errs := make(chan error, procs)
	start := time.Now()
	for p := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestHelperClientProcess$", "-test.count=1")
			cmd.Env = append(os.Environ(),
				"CHLOCAL_HELPER=1",
				"CHLOCAL_HELPER_URL="+db.URL,
				"CHLOCAL_HELPER_DB="+db.Name,
				"CHLOCAL_HELPER_PROC="+strconv.Itoa(p),
				fmt.Sprintf("CHLOCAL_HELPER_ROUNDS=%d", rounds),
				fmt.Sprintf("CHLOCAL_HELPER_BATCH=%d", perBatch))
			out, err := cmd.CombinedOutput()
			if err != nil || !strings.Contains(string(out), "helper ok") {
				errs <- fmt.Errorf("process %d: %v\n%s", p, err, out)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	var n, distinct uint64
	if err := db.Conn.QueryRow(ctx, "SELECT count(), uniqExact(proc, seq) FROM events").Scan(&n, &distinct); err != nil {
		t.Fatal(err)
	}
	if n != procs*rounds*perBatch || distinct != n {
		t.Fatalf("rows = %d (distinct %d), want %d", n, distinct, procs*rounds*perBatch)
	}
	t.Logf("%d processes × %d × %d rows in %v", procs, rounds, perBatch, time.Since(start))
}

// TestHelperClientProcess is the client process of
// TestConcurrentClientProcesses; it does nothing in a normal run.
func TestHelperClientProcess(t *testing.T) {
	if os.Getenv("CHLOCAL_HELPER") != "1" {
		t.Skip("helper process for TestConcurrentClientProcesses")
	}
	proc, _ := strconv.Atoi(os.Getenv("CHLOCAL_HELPER_PROC"))
	rounds, _ := strconv.Atoi(os.Getenv("CHLOCAL_HELPER_ROUNDS"))
	perBatch, _ := strconv.Atoi(os.Getenv("CHLOCAL_HELPER_BATCH"))
	opts, err := chtest.Options(os.Getenv("CHLOCAL_HELPER_URL"), os.Getenv("CHLOCAL_HELPER_DB"))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := clickhouse.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := ctxT(t)
	for r := range rounds {
		batch, err := conn.PrepareBatch(ctx, "INSERT INTO events")
		if err != nil {
			t.Fatal(err)
		}
		for i := range perBatch {
			if err := batch.Append(uint8(proc), uint32(r*perBatch+i), fmt.Sprintf("p%d-r%d-i%d", proc, r, i)); err != nil {
				t.Fatal(err)
			}
		}
		if err := batch.Send(); err != nil {
			t.Fatalf("round %d: %v", r, err)
		}
		var n uint64
		if err := conn.QueryRow(ctx, "SELECT count() FROM events WHERE proc = ?", proc).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != uint64((r+1)*perBatch) {
			t.Fatalf("round %d: own rows = %d, want %d", r, n, (r+1)*perBatch)
		}
	}
	fmt.Println("helper ok")
}

func TestDatabaseSQL(t *testing.T) {
	db := chtest.New(t)
	ctx := ctxT(t)
	sqlDB := clickhouse.OpenDB(db.Options)
	defer sqlDB.Close()
	if _, err := sqlDB.ExecContext(ctx, "CREATE TABLE s (id UInt32, name String) ENGINE = MergeTree ORDER BY id"); err != nil {
		t.Fatal(err)
	}
	if _, err := sqlDB.ExecContext(ctx, "INSERT INTO s VALUES (?, ?), (?, ?)", 1, "one", 2, "two"); err != nil {
		t.Fatal(err)
	}
	var name string
	if err := sqlDB.QueryRowContext(ctx, "SELECT name FROM s WHERE id = ?", 2).Scan(&name); err != nil {
		t.Fatal(err)
	}
	if name != "two" {
		t.Fatalf("name = %q, want two", name)
	}
	var ex *clickhouse.Exception
	if _, err := sqlDB.ExecContext(ctx, "INSERT INTO missing VALUES (1)"); !errors.As(err, &ex) || ex.Code != 60 {
		t.Fatalf("insert into a missing table: %v, want code 60", err)
	}
}
