package shim

import (
	_ "embed"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/hunt-runner/hunt-runner/chstore"
	"github.com/hunt-runner/hunt-runner/store/schema"
)

//go:embed builtin.yaml
var builtinCatalogue []byte

// BuiltinCatalogue returns the catalogue compiled into the binary, for `--queries` authors.
func BuiltinCatalogue() []byte { return slices.Clone(builtinCatalogue) }

// ErrCatalogue marks every catalogue parse or validation failure: a configuration mistake, which
// stops the shim at start rather than being served as an outage.
var ErrCatalogue = errors.New("invalid query catalogue")

// Database references a catalogue may use instead of a literal name.
const (
	DBCoordination = "$coordination" // Options.Database (--database)
	DBOtel         = "$otel"         // Options.OtelDatabase (--otel-database)
)

// dbPlaceholder in a query's SQL is replaced by its back-quoted database.
const dbPlaceholder = "__DB__"

var (
	queryNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)
	paramNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)
	databaseRE  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_-]{0,127}$`)
	// paramValueRE is what a request may supply as a parameter value.
	paramValueRE = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,128}$`)
	// placeholderRE finds ClickHouse query parameters {name:Type} in SQL.
	placeholderRE = regexp.MustCompile(`\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*:`)
)

// catalogueFile is the YAML shape shared by the built-in catalogue and an override. Pointer
// fields tell "not set" from a zero value so that an override changes only what it names.
type catalogueFile struct {
	Queries map[string]*querySpec `yaml:"queries"`
}

type querySpec struct {
	SQL      *string        `yaml:"sql"`
	Builtin  *string        `yaml:"builtin"`
	Database *string        `yaml:"database"`
	Params   []string       `yaml:"params"`
	Binds    map[string]any `yaml:"binds"`
	ClampMin *float64       `yaml:"clamp_min"`
	ClampMax *float64       `yaml:"clamp_max"`
	ColdHold *float64       `yaml:"cold_hold"`
	Timeout  *duration      `yaml:"timeout"`
	MaxStale *duration      `yaml:"max_stale"`
}

// duration accepts Go duration strings ("2s", "10m"); a bare number is refused because "5" could
// mean seconds or nanoseconds.
type duration time.Duration

func (d *duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode || n.Tag != "!!str" {
		return fmt.Errorf("line %d: want a duration such as \"2s\" or \"10m\", got %q", n.Line, n.Value)
	}
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	*d = duration(v)
	return nil
}

// Query is one resolved, validated catalogue entry.
type Query struct {
	Name     string
	Builtin  string            // the builtin the SQL comes from, "" for catalogue SQL
	SQL      string            // with __DB__ resolved
	Database string            // resolved database name
	Params   []string          // request parameters, sorted
	Binds    map[string]string // fixed parameters, as sent to ClickHouse
	ClampMin *float64
	ClampMax *float64
	ColdHold float64
	Timeout  time.Duration
	MaxStale time.Duration
}

// Clamp limits v to the query's bounds.
func (q *Query) Clamp(v float64) float64 {
	if q.ClampMin != nil && v < *q.ClampMin {
		v = *q.ClampMin
	}
	if q.ClampMax != nil && v > *q.ClampMax {
		v = *q.ClampMax
	}
	return v
}

// Catalogue is the set of queries the shim serves.
type Catalogue struct {
	queries map[string]*Query
}

// Lookup returns the named query.
func (c *Catalogue) Lookup(name string) (*Query, bool) {
	q, ok := c.queries[name]
	return q, ok
}

// Names lists the queries, sorted.
func (c *Catalogue) Names() []string {
	names := make([]string, 0, len(c.queries))
	for n := range c.queries {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Builtin SQL generators, by the name a catalogue uses in `builtin:`. Each takes the resolved
// database name.
type builtinFunc func(database string) string

// CatalogueOptions resolve database references and defaults while loading.
type CatalogueOptions struct {
	Database     string        // $coordination; default "hunt_runner"
	OtelDatabase string        // $otel; default "otel"
	Timeout      time.Duration // per-query timeout when a query sets none; default 2s
	MaxStale     time.Duration // max_stale when a query sets none; default 5m
}

func (o CatalogueOptions) withDefaults() CatalogueOptions {
	if o.Database == "" {
		o.Database = chstore.DefaultDatabase
	}
	if o.OtelDatabase == "" {
		o.OtelDatabase = "otel"
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	if o.MaxStale == 0 {
		o.MaxStale = DefaultMaxStale
	}
	return o
}

// LoadCatalogue parses the built-in catalogue, deep-merges override (may be nil) over it,
// resolves databases and builtins, and validates every query. source names the override in
// errors. Every error wraps ErrCatalogue.
func LoadCatalogue(override []byte, source string, o CatalogueOptions) (*Catalogue, error) {
	o = o.withDefaults()
	base, err := parseCatalogue(builtinCatalogue, "built-in catalogue")
	if err != nil {
		return nil, err
	}
	if len(strings.TrimSpace(string(override))) > 0 {
		over, err := parseCatalogue(override, source)
		if err != nil {
			return nil, err
		}
		mergeCatalogue(base, over)
	}
	if len(base.Queries) == 0 {
		return nil, fmt.Errorf("%w: no queries", ErrCatalogue)
	}
	c := &Catalogue{queries: make(map[string]*Query, len(base.Queries))}
	var problems []string
	for _, name := range sortedKeys(base.Queries) {
		q, err := resolveQuery(name, base.Queries[name], o)
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		c.queries[name] = q
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("%w (%s):\n  %s", ErrCatalogue, source, strings.Join(problems, "\n  "))
	}
	return c, nil
}

func parseCatalogue(data []byte, source string) (*catalogueFile, error) {
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	dec.KnownFields(true)
	var f catalogueFile
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrCatalogue, source, err)
	}
	for name, q := range f.Queries {
		if q == nil {
			return nil, fmt.Errorf("%w: %s: query %q is empty", ErrCatalogue, source, name)
		}
	}
	return &f, nil
}

// mergeCatalogue deep-merges over into base: queries and binds merge key by key, params (a
// list) replaces, scalars replace. sql and builtin exclude each other, so naming one clears
// the other inherited from base.
func mergeCatalogue(base, over *catalogueFile) {
	if base.Queries == nil {
		base.Queries = map[string]*querySpec{}
	}
	for name, o := range over.Queries {
		b, ok := base.Queries[name]
		if !ok {
			base.Queries[name] = o
			continue
		}
		if o.SQL != nil {
			b.SQL, b.Builtin = o.SQL, nil
		}
		if o.Builtin != nil {
			b.Builtin, b.SQL = o.Builtin, nil
		}
		if o.Database != nil {
			b.Database = o.Database
		}
		if o.Params != nil {
			b.Params = o.Params
		}
		if o.Binds != nil {
			if b.Binds == nil {
				b.Binds = map[string]any{}
			}
			for k, v := range o.Binds {
				b.Binds[k] = v
			}
		}
		for _, f := range []struct{ dst, src **float64 }{
			{&b.ClampMin, &o.ClampMin}, {&b.ClampMax, &o.ClampMax}, {&b.ColdHold, &o.ColdHold},
		} {
			if *f.src != nil {
				*f.dst = *f.src
			}
		}
		if o.Timeout != nil {
			b.Timeout = o.Timeout
		}
		if o.MaxStale != nil {
			b.MaxStale = o.MaxStale
		}
	}
}

func resolveQuery(name string, s *querySpec, o CatalogueOptions) (*Query, error) {
	if !queryNameRE.MatchString(name) {
		return nil, fmt.Errorf("query %q: name must match %s", name, queryNameRE)
	}
	q := &Query{Name: name, ClampMin: s.ClampMin, ClampMax: s.ClampMax, Timeout: o.Timeout, MaxStale: o.MaxStale}
	for _, step := range []func(*Query, *querySpec, CatalogueOptions) error{resolveDatabase, resolveSQL, resolveParams, resolveLimits} {
		if err := step(q, s, o); err != nil {
			return nil, fmt.Errorf("query %q: %w", name, err)
		}
	}
	return q, nil
}

// resolveDatabase names the database: $coordination, $otel or a literal one.
func resolveDatabase(q *Query, s *querySpec, o CatalogueOptions) error {
	if s.Database == nil {
		return nil
	}
	switch db := *s.Database; db {
	case DBCoordination:
		q.Database = o.Database
	case DBOtel:
		q.Database = o.OtelDatabase
	default:
		q.Database = db
	}
	if !databaseRE.MatchString(q.Database) {
		return fmt.Errorf("database %q must match %s (or be %s or %s)", q.Database, databaseRE, DBCoordination, DBOtel)
	}
	return nil
}

// resolveSQL takes the builtin's SQL or the given one, with the database quoted in.
func resolveSQL(q *Query, s *querySpec, _ CatalogueOptions) error {
	switch {
	case s.SQL != nil && s.Builtin != nil:
		return errors.New("set sql or builtin, not both")
	case s.Builtin != nil:
		gen, ok := builtins[*s.Builtin]
		if !ok {
			return fmt.Errorf("unknown builtin %q (known: %s)", *s.Builtin, strings.Join(sortedKeys(builtins), ", "))
		}
		if q.Database == "" {
			return fmt.Errorf("builtin %q needs a database", *s.Builtin)
		}
		q.SQL, q.Builtin = gen(q.Database), *s.Builtin
	case s.SQL != nil:
		sql := strings.TrimSpace(*s.SQL)
		if sql == "" {
			return errors.New("sql is empty")
		}
		hasDB := strings.Contains(sql, dbPlaceholder)
		switch {
		case hasDB && q.Database == "":
			return fmt.Errorf("sql uses %s but no database is set", dbPlaceholder)
		case !hasDB && s.Database != nil:
			return fmt.Errorf("database is set but sql never uses %s", dbPlaceholder)
		}
		q.SQL = strings.ReplaceAll(sql, dbPlaceholder, schema.QuoteIdent(q.Database))
	default:
		return errors.New("set sql or builtin")
	}
	return nil
}

// resolveParams checks that params and binds are declared once each and that the SQL uses
// exactly the declared ones.
func resolveParams(q *Query, s *querySpec, _ CatalogueOptions) error {
	declared := map[string]bool{}
	for _, p := range s.Params {
		if !paramNameRE.MatchString(p) {
			return fmt.Errorf("param %q must match %s", p, paramNameRE)
		}
		if declared[p] {
			return fmt.Errorf("param %q declared twice", p)
		}
		declared[p] = true
		q.Params = append(q.Params, p)
	}
	sort.Strings(q.Params)
	q.Binds = make(map[string]string, len(s.Binds))
	for k, v := range s.Binds {
		if !paramNameRE.MatchString(k) {
			return fmt.Errorf("bind %q must match %s", k, paramNameRE)
		}
		if declared[k] {
			return fmt.Errorf("%q is both a param and a bind", k)
		}
		str, err := bindString(v)
		if err != nil {
			return fmt.Errorf("bind %q: %v", k, err)
		}
		declared[k] = true
		q.Binds[k] = str
	}
	used := map[string]bool{}
	for _, m := range placeholderRE.FindAllStringSubmatch(q.SQL, -1) {
		used[m[1]] = true
		if !declared[m[1]] {
			return fmt.Errorf("sql uses {%s:…} which is neither a param nor a bind", m[1])
		}
	}
	for _, k := range sortedKeys(declared) {
		if !used[k] {
			return fmt.Errorf("%q is declared but sql never uses {%s:Type}", k, k)
		}
	}
	return nil
}

// resolveLimits checks the clamp, the cold hold inside it, the timeout and the staleness.
func resolveLimits(q *Query, s *querySpec, _ CatalogueOptions) error {
	if s.ClampMin != nil && s.ClampMax != nil && *s.ClampMin > *s.ClampMax {
		return fmt.Errorf("clamp_min %v > clamp_max %v", *s.ClampMin, *s.ClampMax)
	}
	if s.ColdHold != nil {
		q.ColdHold = *s.ColdHold
	}
	if c := q.Clamp(q.ColdHold); c != q.ColdHold {
		return fmt.Errorf("cold_hold %v is outside [clamp_min, clamp_max]", q.ColdHold)
	}
	if s.Timeout != nil {
		q.Timeout = time.Duration(*s.Timeout)
	}
	if q.Timeout < 50*time.Millisecond || q.Timeout > time.Minute {
		return fmt.Errorf("timeout %v must be within [50ms, 1m]", q.Timeout)
	}
	if s.MaxStale != nil {
		q.MaxStale = time.Duration(*s.MaxStale)
	}
	if q.MaxStale <= 0 {
		return errors.New("max_stale must be positive")
	}
	return nil
}

// bindString renders a fixed bind the way ClickHouse parses query parameter values.
func bindString(v any) (string, error) {
	switch x := v.(type) {
	case string:
		return x, nil
	case int:
		return strconv.Itoa(x), nil
	case int64:
		return strconv.FormatInt(x, 10), nil
	case uint64:
		return strconv.FormatUint(x, 10), nil
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64), nil
	case bool:
		if x {
			return "1", nil
		}
		return "0", nil
	}
	return "", fmt.Errorf("want a string, number or bool, got %T", v)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
