package configsrc

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/hunt-runner/hunt-runner/store/schema"
)

// Policy is what an operator allows hunt queries beyond the default allowlists (allowlist.go,
// functions.go). The zero value is the strict default: the default functions and generators,
// no other table function, no dictionary, no system tables, and no reference to hunt-runner's
// own database is checked (set CoordinationDatabase to refuse those). The same policy must be
// given to the offline check (Options.Policy, GitOptions.Policy) and to CheckWithServer.
type Policy struct {
	// AllowTableFunctions names table functions (case-insensitive) a hunt may call beyond the
	// default generators, such as merge. Naming one that reaches off the server (url, s3,
	// remote, file, …) is the operator's explicit decision.
	AllowTableFunctions []string
	// AllowFunctions names functions (case-insensitive) a hunt may call beyond the default
	// list (DefaultFunctions), such as throwIf.
	AllowFunctions []string
	// AllowDictionaries names the dictionaries (db.name, exactly as a hunt writes it in
	// dictGet's first argument) hunts may read; none by default.
	AllowDictionaries []string
	// AllowSystem lets hunts read system.* and information_schema tables.
	AllowSystem bool
	// CoordinationDatabase is hunt-runner's own database: a hunt may never name it.
	CoordinationDatabase string
	// Budget is the read budget's default and ceiling (sources.go).
	Budget Budget
	// AllowPermanentExceptions lets an exception omit until: (--allow-permanent-exceptions).
	// It decides nothing the server checks, so it is not part of CheckScope.
	AllowPermanentExceptions bool `json:"-"`
}

// ParseTableFunctions reads a comma-separated --allow-table-functions value.
func ParseTableFunctions(s string) ([]string, error) { return parseNames(s, "table function", true) }

// ParseFunctions reads a comma-separated --allow-functions value.
func ParseFunctions(s string) ([]string, error) { return parseNames(s, "function", true) }

// ParseDictionaries reads a comma-separated --allow-dictionaries value (db.name or name, case
// kept: dictionary names are case-sensitive).
func ParseDictionaries(s string) ([]string, error) { return parseNames(s, "dictionary", false) }

func parseNames(s, what string, fold bool) ([]string, error) {
	var out []string
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if fold {
			f = strings.ToLower(f)
		}
		if f == "" {
			continue
		}
		ok := identRe.MatchString(f)
		if what == "dictionary" {
			ok = dictNameRe.MatchString(f)
		}
		if !ok {
			return nil, fmt.Errorf("%s name %q is not a plain identifier", what, f)
		}
		out = append(out, f)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

func (p Policy) allowedTableFunctions() map[string]bool {
	m := make(map[string]bool, len(p.AllowTableFunctions))
	for _, f := range p.AllowTableFunctions {
		m[strings.ToLower(f)] = true
	}
	return m
}

// schemaIssue says why a query may not name database db, or "".
func (p Policy) schemaIssue(db string) string {
	if p.CoordinationDatabase != "" && db == p.CoordinationDatabase {
		return "query names hunt-runner's own database; a hunt may read only source data"
	}
	if !p.AllowSystem {
		switch strings.ToLower(db) {
		case "system", "information_schema":
			return "query reads system tables, which hold other queries' text, users and server state; an operator can allow them with --allow-system-tables"
		}
	}
	return ""
}

// forbiddenDatabases are the databases no hunt may read under p: hunt-runner's own, and the
// system ones unless allowed.
func (p Policy) forbiddenDatabases() []string {
	var out []string
	if p.CoordinationDatabase != "" {
		out = append(out, p.CoordinationDatabase)
	}
	if !p.AllowSystem {
		out = append(out, "system", "information_schema")
	}
	return out
}

// tableIssue says why a query may not name table (unqualified) in a FROM or JOIN: hunt-runner's
// own tables, which resolve when the connection's default database is the coordination one.
func (p Policy) tableIssue(table string) string {
	if p.CoordinationDatabase != "" && slices.Contains(schema.ObjectNames(), table) {
		return "query reads one of hunt-runner's own tables; a hunt may read only source data"
	}
	return ""
}

// offServer lists functions (table functions, and the scalar file()) that read from or act
// outside the ClickHouse server. They are refused anywhere in a query unless the policy allows
// them by name. Keys are lower case; prefix entries cover a whole family (s3Cluster,
// remoteSecure, clusterAllReplicas, icebergS3, …).
var offServer = []struct {
	name   string
	prefix bool
	why    string
}{
	{"url", false, "fetches data over HTTP from outside the server"},
	{"urlcluster", false, "fetches data over HTTP from outside the server"},
	{"s3", true, "reads object storage outside the server"},
	{"gcs", true, "reads object storage outside the server"},
	{"oss", true, "reads object storage outside the server"},
	{"cosn", true, "reads object storage outside the server"},
	{"azureblobstorage", true, "reads object storage outside the server"},
	{"hdfs", true, "reads HDFS outside the server"},
	{"iceberg", true, "reads a data lake outside the server"},
	{"deltalake", true, "reads a data lake outside the server"},
	{"hudi", true, "reads a data lake outside the server"},
	{"paimon", true, "reads a data lake outside the server"},
	{"remote", true, "queries another ClickHouse server"},
	{"cluster", true, "fans the query out to other servers"},
	{"mysql", true, "queries an external MySQL database"},
	{"postgresql", true, "queries an external PostgreSQL database"},
	{"mongodb", true, "queries an external MongoDB"},
	{"redis", true, "queries an external Redis"},
	{"sqlite", true, "opens an SQLite file on the server"},
	{"jdbc", true, "queries an external database through the JDBC bridge"},
	{"odbc", true, "queries an external database through the ODBC bridge"},
	{"ytsaurus", true, "queries an external YTsaurus cluster"},
	{"arrowflight", true, "queries an external Arrow Flight service"},
	{"file", false, "reads files on the server's filesystem"},
	{"filecluster", false, "reads files on the servers' filesystems"},
	{"filesystem", false, "lists files on the server's filesystem"},
	{"executable", true, "runs a program on the server"},
	{"input", false, "reads data sent by the client, and a hunt sends none"},
	{"catboostevaluate", false, "loads a model file from the server's filesystem"},
}

func offServerReason(name string) (string, bool) {
	l := strings.ToLower(name)
	for _, f := range offServer {
		if l == f.name || (f.prefix && strings.HasPrefix(l, f.name)) {
			return f.why, true
		}
	}
	return "", false
}

// deniedSettings are settings with a specific reason to refuse them: they would lift the
// read-only guard or the per-run limits. Everything not in allowedSettings is refused too.
var deniedSettings = map[string]string{
	"readonly":                               "would change the read-only guard",
	"allow_ddl":                              "would allow DDL",
	"allow_introspection_functions":          "would allow introspection functions",
	"max_execution_time":                     "would override the hunt's timeout; set timeout: instead",
	"max_execution_time_leaf":                "would override the hunt's timeout; set timeout: instead",
	"timeout_overflow_mode":                  "would override the hunt's timeout; set timeout: instead",
	"timeout_overflow_mode_leaf":             "would override the hunt's timeout; set timeout: instead",
	"max_estimated_execution_time":           "would override the hunt's timeout; set timeout: instead",
	"max_memory_usage":                       "would override the hunt identity's memory limit",
	"allow_experimental_database_replicated": "would change server behaviour",
}

// settingKind says what values an allowlisted setting takes.
type settingKind int

const (
	settingEnum   settingKind = iota // a word or string the server checks (join_algorithm = 'hash')
	settingBool                      // 0, 1, true or false
	settingNumber                    // a non-negative integer at most the setting's ceiling
)

type settingRule struct {
	kind    settingKind
	ceiling uint64 // for settingNumber
}

// Ceilings of the numeric settings a hunt may set: each lowers or tunes what the hunt identity's
// profile already bounds, and a ceiling keeps one hunt from asking the server for more than a
// fair share (max_threads = 4096 would).
const (
	MaxHuntThreads        = 16
	MaxHuntBlockSize      = 1 << 20 // rows per block
	MaxHuntExternalBytes  = 8 << 30 // memory an aggregation or sort uses before it spills to disk
	maxHuntSettingLiteral = 20      // digits of a uint64
)

// allowedSettings are the settings a hunt may set: they tune how a read executes, never what it
// may reach or how long it may run.
var allowedSettings = map[string]settingRule{
	"max_threads":                        {settingNumber, MaxHuntThreads},
	"max_block_size":                     {settingNumber, MaxHuntBlockSize},
	"join_algorithm":                     {kind: settingEnum},
	"join_use_nulls":                     {kind: settingBool},
	"max_bytes_before_external_group_by": {settingNumber, MaxHuntExternalBytes},
	"max_bytes_before_external_sort":     {settingNumber, MaxHuntExternalBytes},
	"optimize_read_in_order":             {kind: settingBool},
	"optimize_aggregation_in_order":      {kind: settingBool},
	"aggregate_functions_null_for_empty": {kind: settingBool},
	"transform_null_in":                  {kind: settingBool},
	"cast_keep_nullable":                 {kind: settingBool},
	"prefer_column_name_to_alias":        {kind: settingBool},
	"use_skip_indexes":                   {kind: settingBool},
	"force_primary_key":                  {kind: settingBool},
	"force_index_by_date":                {kind: settingBool},
	"enable_analyzer":                    {kind: settingBool},
	"date_time_input_format":             {kind: settingEnum},
	"any_join_distinct_right_table_keys": {kind: settingBool},
	"distributed_product_mode":           {kind: settingEnum},
	"prefer_localhost_replica":           {kind: settingBool},
}

// settingValueIssue says why value (the tokens after "name =") is not a value the hunt may give
// the allowlisted setting name, or "".
func settingValueIssue(name string, value []token) string {
	r := allowedSettings[strings.ToLower(name)]
	single := len(value) == 1
	switch r.kind {
	case settingBool:
		if single && (value[0].text == "0" || value[0].text == "1" || strings.EqualFold(value[0].text, "true") || strings.EqualFold(value[0].text, "false")) {
			return ""
		}
		return "takes 0 or 1"
	case settingNumber:
		if single && value[0].kind == tkNumber && len(value[0].text) <= maxHuntSettingLiteral {
			if n, err := strconv.ParseUint(value[0].text, 10, 64); err == nil && n <= r.ceiling {
				return ""
			}
		}
		return fmt.Sprintf("takes a whole number at most %d in a hunt", r.ceiling)
	}
	if single && (value[0].kind == tkWord || value[0].kind == tkString) {
		return ""
	}
	return "takes one word or string"
}

// AllowedSettings lists the settings a hunt query may set, sorted (for documentation).
func AllowedSettings() []string {
	out := make([]string, 0, len(allowedSettings))
	for s := range allowedSettings {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// settingRefusal says why a hunt may not set name.
func settingRefusal(name string) (string, bool) {
	l := strings.ToLower(name)
	if why, bad := deniedSettings[l]; bad {
		return why, true
	}
	if _, ok := allowedSettings[l]; ok {
		return "", false
	}
	return "is not on hunt-runner's settings allowlist (see docs/hunts.md)", true
}
