package schedule

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestHuntSetNames(t *testing.T) {
	for _, ok := range []string{"default", "team-a", "Release_1.2", "x"} {
		if err := ValidateHuntSet(ok); err != nil {
			t.Errorf("ValidateHuntSet(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"", "-x", "a b", "a'b", strings.Repeat("x", 64)} {
		if err := ValidateHuntSet(bad); !errors.Is(err, ErrInvalidHuntSet) {
			t.Errorf("ValidateHuntSet(%q) = %v, want ErrInvalidHuntSet", bad, err)
		}
	}
	if _, err := Materialise(context.Background(), failingStore{}, nil, "", MaterialiseOptions{Set: "a'b", AllowEmpty: true}); !errors.Is(err, ErrInvalidHuntSet) {
		t.Errorf("Materialise with a bad set name: %v", err)
	}
}
