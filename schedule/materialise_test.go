package schedule

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

func TestMaterialiseRejectsBadRows(t *testing.T) {
	wm := failingStore{}
	for _, rows := range [][]Row{
		{{HuntID: "", IntervalSeconds: 60, Enabled: true}},
		{{HuntID: "a", IntervalSeconds: 60, Enabled: true}, {HuntID: "a", IntervalSeconds: 60, Enabled: true}},
		{{HuntID: "a", IntervalSeconds: 0, Enabled: true}},
		{{HuntID: "a", IntervalSeconds: 60, PhaseOffset: 60, Enabled: true}},
	} {
		if _, err := Materialise(context.Background(), wm, rows, "h", MaterialiseOptions{}); !errors.Is(err, ErrInvalidRow) {
			t.Errorf("rows %+v: err = %v, want ErrInvalidRow", rows, err)
		}
	}
}

// failingStore fails every call: a test that reaches it has skipped validation.
type failingStore struct{}

func (failingStore) Published(context.Context, string) (Published, error) {
	return Published{}, fmt.Errorf("unexpected read")
}
func (failingStore) Publish(context.Context, []Row, Publication) error {
	return fmt.Errorf("unexpected write")
}
