package shim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/big"
	"reflect"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/shopspring/decimal"
)

// Querier is the one ClickHouse call the shim makes. A clickhouse-go driver.Conn satisfies it.
type Querier interface {
	Query(ctx context.Context, query string, args ...any) (driver.Rows, error)
}

// Why a value is held. They label the held counter and appear in responses and logs.
const (
	ReasonUnreachable = "unreachable" // no answer from the server: refused, reset, DNS, …
	ReasonTimeout     = "timeout"     // the client deadline passed, or the server's max_execution_time
	ReasonQueryError  = "query_error" // the server answered with an exception
	ReasonBadResult   = "bad_result"  // not exactly one row with a finite number in its first column
)

// ErrBadResult marks an answer the shim cannot turn into a number.
var ErrBadResult = errors.New("bad result")

// errDeadline is the shim's own client deadline.
var errDeadline = errors.New("client deadline passed")

// ClickHouse exception codes the shim classifies.
const (
	codeTimeoutExceeded = 159
	codeReadonly        = 164
)

// fetchFunc runs one query and returns its number. Tests may wrap it.
type fetchFunc func(ctx context.Context, q *Query, params map[string]string) (float64, error)

// runQuery runs q with its params and binds bound as ClickHouse query parameters. It answers by
// the deadline whatever the driver does: the query runs in its own goroutine, and the deadline
// cancels it. The context given to the driver has no deadline on purpose: clickhouse-go turns a
// context deadline into a max_execution_time setting, which a readonly=1 profile refuses.
func (s *Server) runQuery(ctx context.Context, q *Query, params map[string]string) (float64, error) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	type answer struct {
		v   float64
		err error
	}
	done := make(chan answer, 1)
	go func() {
		// A panic here would end the process, not just this request (net/http recovers only
		// the handler's goroutine): a driver failing on an odd reply must still be held.
		defer func() {
			if r := recover(); r != nil {
				done <- answer{0, fmt.Errorf("%w: the driver panicked: %v", ErrBadResult, r)}
			}
		}()
		v, err := s.queryOnce(ctx, q, params)
		done <- answer{v, err}
	}()
	timer := time.NewTimer(q.Timeout)
	defer timer.Stop()
	select {
	case a := <-done:
		cancel()
		return a.v, a.err
	case <-timer.C:
		cancel()
		return 0, fmt.Errorf("%w after %v", errDeadline, q.Timeout)
	}
}

func (s *Server) queryOnce(ctx context.Context, q *Query, params map[string]string) (float64, error) {
	bound := make(map[string]string, len(params)+len(q.Binds))
	for k, v := range q.Binds {
		bound[k] = v
	}
	for k, v := range params {
		bound[k] = v
	}
	opts := []clickhouse.QueryOption{clickhouse.WithParameters(bound)}
	sendSettings := !s.noSettings.Load()
	if sendSettings {
		// The server stops the query too, a little after the client gave up on it.
		opts = append(opts, clickhouse.WithSettings(clickhouse.Settings{
			"max_execution_time": int(math.Ceil(q.Timeout.Seconds())),
		}))
	}
	v, err := scanOne(s.conn.Query(clickhouse.Context(ctx, opts...), q.SQL))
	var ex *clickhouse.Exception
	if sendSettings && errors.As(err, &ex) && ex.Code == codeReadonly {
		// A readonly=1 settings profile (the provisioned scaler identity) refuses per-query
		// settings; its own max_execution_time applies instead.
		if s.noSettings.CompareAndSwap(false, true) {
			s.log.Info("ClickHouse refuses per-query settings (readonly profile); relying on the profile's max_execution_time")
		}
		v, err = scanOne(s.conn.Query(clickhouse.Context(ctx, clickhouse.WithParameters(bound)), q.SQL))
	}
	return v, err
}

// scanOne reads exactly one row and turns its first column into a finite number.
func scanOne(rows driver.Rows, err error) (float64, error) {
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	cols := rows.ColumnTypes()
	if len(cols) == 0 {
		return 0, fmt.Errorf("%w: no columns", ErrBadResult)
	}
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return 0, err
		}
		return 0, fmt.Errorf("%w: no rows", ErrBadResult)
	}
	dest := make([]any, len(cols))
	for i, c := range cols {
		dest[i] = reflect.New(c.ScanType()).Interface()
	}
	if err := rows.Scan(dest...); err != nil {
		return 0, fmt.Errorf("%w: %v", ErrBadResult, err)
	}
	if rows.Next() {
		return 0, fmt.Errorf("%w: more than one row", ErrBadResult)
	}
	if err := rows.Err(); err != nil {
		return 0, err
	}
	v, err := toFloat(reflect.ValueOf(dest[0]).Elem().Interface())
	if err != nil {
		return 0, fmt.Errorf("%w: column %s: %v", ErrBadResult, cols[0].Name(), err)
	}
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("%w: column %s is %v", ErrBadResult, cols[0].Name(), v)
	}
	return v, nil
}

func toFloat(v any) (float64, error) {
	switch x := v.(type) {
	case uint8:
		return float64(x), nil
	case uint16:
		return float64(x), nil
	case uint32:
		return float64(x), nil
	case uint64:
		return float64(x), nil
	case int8:
		return float64(x), nil
	case int16:
		return float64(x), nil
	case int32:
		return float64(x), nil
	case int64:
		return float64(x), nil
	case float32:
		return float64(x), nil
	case float64:
		return x, nil
	case bool:
		if x {
			return 1, nil
		}
		return 0, nil
	case decimal.Decimal:
		return x.InexactFloat64(), nil
	case big.Int:
		f, _ := new(big.Float).SetInt(&x).Float64()
		return f, nil
	case *big.Int:
		if x == nil {
			return 0, errors.New("NULL")
		}
		f, _ := new(big.Float).SetInt(x).Float64()
		return f, nil
	}
	rv := reflect.ValueOf(v)
	if rv.Kind() == reflect.Pointer { // Nullable(T)
		if rv.IsNil() {
			return 0, errors.New("NULL")
		}
		return toFloat(rv.Elem().Interface())
	}
	return 0, fmt.Errorf("type %T is not numeric", v)
}

// classify names why a fetch failed.
func classify(err error) string {
	var ex *clickhouse.Exception
	switch {
	case errors.Is(err, ErrBadResult):
		return ReasonBadResult
	case errors.Is(err, errDeadline), errors.Is(err, context.DeadlineExceeded):
		return ReasonTimeout
	case errors.As(err, &ex):
		if ex.Code == codeTimeoutExceeded {
			return ReasonTimeout
		}
		return ReasonQueryError
	case strings.Contains(err.Error(), "timeout"):
		return ReasonTimeout
	}
	return ReasonUnreachable
}
