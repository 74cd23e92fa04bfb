package main

import (
	"strings"
	"testing"

	"github.com/hunt-runner/hunt-runner/store/schema"
)

// The provision help lists, per role, the tables the generated GRANTs cover: it is rendered
// from schema.Grants, so a table added there reaches the help without an edit here.
func TestProvisionHelpListsEveryGrant(t *testing.T) {
	help := strings.Join(strings.Fields(provisionCommand().Description), " ")
	for _, tc := range []struct {
		id   schema.Identity
		role string
	}{{schema.IdentityRunner, "runner"}, {schema.IdentityMaterialiser, "materialiser"}} {
		entry := strings.Join(strings.Fields(roleHelp(tc.id, tc.role, "")), " ")
		if !strings.Contains(help, strings.TrimSuffix(entry, ";")) {
			t.Errorf("help has no entry %q", entry)
		}
		for _, a := range schema.Grants(tc.id) {
			if !strings.Contains(entry, " "+a.Table) {
				t.Errorf("%s's help entry %q does not name %s", tc.role, entry, a.Table)
			}
		}
		if rw := strings.Index(entry, "SELECT on "); rw >= 0 {
			for _, a := range schema.Grants(tc.id) {
				if a.Insert && strings.Contains(entry[rw:], " "+a.Table+" ") {
					t.Errorf("%s's help lists %s as read-only; it is granted INSERT", tc.role, a.Table)
				}
			}
		}
	}
}
