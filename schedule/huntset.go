package schedule

import (
	"errors"
	"fmt"
	"regexp"
)

// ErrSetConflict is returned by Materialise when a hunt id of the set is live in another set:
// publishing it would take the other set's hunt over, and that set's next materialise would
// tombstone it again.
var ErrSetConflict = errors.New("hunt id published by another hunt set")

// ErrInvalidHuntSet is wrapped when a hunt set name is not usable.
var ErrInvalidHuntSet = errors.New("invalid hunt set name")

// huntSetName keeps set names to what fits a Helm release or a team name. It also keeps them
// out of reach of SQL quoting: store's due query embeds the name as a literal (it must stay
// parameter-free to be stored as a view or pasted into a scaler).
var huntSetName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$`)

// ValidateHuntSet checks a --hunt-set value.
func ValidateHuntSet(set string) error {
	if !huntSetName.MatchString(set) {
		return fmt.Errorf("%w %q: want 1 to 63 letters, digits, '.', '_' or '-', starting with a letter or digit", ErrInvalidHuntSet, set)
	}
	return nil
}
