package shim

import (
	"fmt"
	"math"
	"net/http"
	"testing"
	"time"

	"github.com/tidwall/gjson"
	"k8s.io/apimachinery/pkg/api/resource"
)

// kedaRead reads a response the way KEDA's metrics-api scaler (format json) does: a non-200
// status is an error; the value is gjson.GetBytes at valueLocation; a number is used as is, a
// string is parsed as a Kubernetes Quantity, anything else is an error; NaN, ±Inf and negative
// values are published as 0; the trigger is active iff value > activation.
func kedaRead(status int, body []byte, valueLocation string, activation float64) (value float64, active bool, err error) {
	if status != http.StatusOK {
		return 0, false, fmt.Errorf("api returned %d", status)
	}
	r := gjson.GetBytes(body, valueLocation)
	switch r.Type {
	case gjson.Number:
		value = r.Num
	case gjson.String:
		q, err := resource.ParseQuantity(r.Str)
		if err != nil {
			return 0, false, fmt.Errorf("valueLocation %s points to %q, not a Quantity: %w", valueLocation, r.Str, err)
		}
		value = q.AsApproximateFloat64()
	default:
		return 0, false, fmt.Errorf("valueLocation %s must point to a numeric value or a string parseable as a Quantity, got %s", valueLocation, r.Type)
	}
	if math.IsNaN(value) || math.IsInf(value, 0) || value < 0 {
		value = 0
	}
	return value, value > activation, nil
}

func TestKedaReaderSemantics(t *testing.T) {
	for _, tc := range []struct {
		status int
		body   string
		value  float64
		active bool
		err    bool
	}{
		{200, `{"value":23}`, 23, true, false},
		{200, `{"value":0}`, 0, false, false},
		{200, `{"value":"12"}`, 12, true, false},
		{200, `{"value":"1500m"}`, 1.5, true, false},
		{200, `{"value":-4}`, 0, false, false},
		{200, `{"value":0.5}`, 0.5, true, false},
		{200, `{"val":1}`, 0, false, true},
		{200, `{"value":null}`, 0, false, true},
		{200, `{"value":"lots"}`, 0, false, true},
		{503, `{"value":3}`, 0, false, true},
	} {
		v, active, err := kedaRead(tc.status, []byte(tc.body), "value", 0)
		if (err != nil) != tc.err || v != tc.value || active != tc.active {
			t.Errorf("%d %s → %v %v %v, want %v %v err=%v", tc.status, tc.body, v, active, err, tc.value, tc.active, tc.err)
		}
	}
}

// TestKedaReadsTheShim drives the shim through every state KEDA can meet and reads each answer
// as KEDA would: every ClickHouse state yields a number (never a scaler error that would let
// KEDA's fallback override the other triggers); only configuration mistakes are errors.
func TestKedaReadsTheShim(t *testing.T) {
	e := startEngine(t)
	coordination(t, e.conn, e.db, "a", "b")
	token := newToken()
	s := startShim(t, Options{Conn: e.conn, Database: e.db, OtelDatabase: e.db, Token: token, RetryBackoff: time.Nanosecond})
	auth := []string{"Authorization", "Bearer " + token}
	read := func(path string, activation float64, header ...string) (float64, bool, error) {
		r := s.get(t, path, header...)
		return kedaRead(r.Status, r.Body, "value", activation)
	}
	type want struct {
		value  float64
		active bool
	}
	check := func(stage, path string, activation float64, w want) {
		t.Helper()
		v, active, err := read(path, activation, auth...)
		if err != nil || v != w.value || active != w.active {
			t.Errorf("%s %s: KEDA reads %v active=%v err=%v, want %v active=%v", stage, path, v, active, err, w.value, w.active)
		}
	}
	check("fresh", "/keda/hunt-backlog", 0, want{2, true})
	check("fresh", "/keda/hunt-backlog", 2, want{2, false}) // active only when strictly above activation
	check("fresh", "/keda/pressure?service=none", 0, want{0, false})

	e.srv.Stop()
	check("held", "/keda/hunt-backlog", 0, want{2, true})
	check("cold", "/keda/pressure?service=none-yet", 0, want{0, false})

	for _, bad := range []struct {
		path   string
		header []string
	}{
		{"/keda/hunt-backlog", nil},           // no token: 401
		{"/keda/pressure?service=a%27", auth}, // invalid parameter: 400
		{"/q/typo", auth},                     // unknown query: 404
		{"/keda/hunt-backlog", []string{"Authorization", "Bearer nope"}},
	} {
		if _, _, err := read(bad.path, 0, bad.header...); err == nil {
			t.Errorf("%s %v: KEDA reads no error; a configuration mistake must surface", bad.path, bad.header)
		}
	}
	e.srv.Start()
	check("recovered", "/keda/hunt-backlog", 0, want{2, true})
}
