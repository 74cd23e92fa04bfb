package runner

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/hunt-runner/hunt-runner/hunt"
)

// lockedBuffer collects log output written from the run goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A server error folds a row value into its message. The run's record keeps the whole message
// (it is where the run's findings would be read), but the runner's log line and its trace carry
// only the stage, the error code and the run id.
func TestRunErrorRowValuesStayInTheRecord(t *testing.T) {
	e := newEnv(t)
	const secret = "row-value-7f3a9c"
	e.exec("CREATE TABLE leak (v String) ENGINE = MergeTree ORDER BY v")
	e.exec("INSERT INTO leak VALUES ('" + secret + "')")
	h := hunt.Hunt{ID: "folds", Interval: 3600 * time.Second, Offset: sec(e.mid(3600)),
		Query: "SELECT toUInt32(v) AS n FROM leak WHERE {window_start:DateTime64(3)} < {window_end:DateTime64(3)}"}
	var logs lockedBuffer
	spans := tracetest.NewSpanRecorder()
	r := e.runner("pod-a", testSet("x", h), func(o *Options) {
		o.Logger = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		o.Tracer = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)).Tracer("test")
	})
	e.tickAndWait(r)

	runs := e.runs("folds")
	if len(runs) != 1 || runs[0].Status != hunt.RunFailed || !strings.Contains(runs[0].Error, secret) {
		t.Fatalf("runs %+v, want one failed run whose record keeps the server's message", runs)
	}
	out := logs.String()
	if strings.Contains(out, secret) {
		t.Fatalf("the log carries the row value %q:\n%s", secret, out)
	}
	var failed string
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, `"msg":"hunt run failed"`) {
			failed = line
		}
	}
	if !strings.Contains(failed, "ClickHouse error code 6") || !strings.Contains(failed, `"run_id":`) {
		t.Fatalf("the failure's log line %q does not name the error code and the run id", failed)
	}
	recorded := 0
	for _, s := range spans.Ended() {
		for _, ev := range s.Events() {
			recorded++
			for _, a := range ev.Attributes {
				if strings.Contains(a.Value.String(), secret) {
					t.Fatalf("span %s event %s carries the row value: %s", s.Name(), ev.Name, a.Value.String())
				}
			}
		}
		if strings.Contains(s.Status().Description, secret) {
			t.Fatalf("span %s status carries the row value", s.Name())
		}
	}
	if recorded == 0 {
		t.Fatal("no span recorded the run's error")
	}
}
