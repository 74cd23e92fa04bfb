package hunttest

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"strings"

	"github.com/hunt-runner/hunt-runner/configsrc"
)

// WriteText prints the report the way `go test -v` does: one line per test, the missing and
// unexpected rows of a failure, problems as file:line:col: message, then the coverage and the
// summary line "N passed, M failed".
func (r *Report) WriteText(w io.Writer, requireTests bool) {
	for _, res := range r.Results {
		word := map[Status]string{Pass: "PASS", Fail: "FAIL", Error: "ERROR"}[res.Status]
		fmt.Fprintf(w, "--- %s: %s/%s (%.2fs)\n", word, res.Hunt, res.Name, res.Duration.Seconds())
		switch res.Status {
		case Fail:
			fmt.Fprintf(w, "    %s:%d: findings differ from expect (%d found)\n", res.File, res.Line, res.Found)
			writeRows(w, "missing (expected, not found)", res.Missing)
			writeRows(w, "unexpected (found, not expected)", res.Extra)
		case Error:
			fmt.Fprintf(w, "    %s\n", res.Problem.Error())
		}
	}
	inResults := map[configsrc.Problem]bool{}
	for _, res := range r.Results {
		if res.Problem != nil {
			inResults[*res.Problem] = true
		}
	}
	for _, p := range r.Problems {
		if !inResults[p] {
			fmt.Fprintln(w, p.Error())
		}
	}
	var untested, incomplete []string
	for _, c := range r.Coverage {
		switch {
		case c.Positive+c.Negative == 0:
			untested = append(untested, c.Hunt)
		case !c.Complete():
			incomplete = append(incomplete, c.Hunt+" ("+c.missing()+")")
		}
	}
	if len(untested) > 0 {
		fmt.Fprintf(w, "hunts with no test: %s\n", strings.Join(untested, ", "))
	}
	if requireTests && len(incomplete) > 0 {
		fmt.Fprintf(w, "hunts without a positive and a negative test: %s\n", strings.Join(incomplete, ", "))
	}
	passed, failed, errored := r.Counts()
	summary := fmt.Sprintf("%d passed, %d failed", passed, failed)
	if errored > 0 {
		summary += fmt.Sprintf(", %d could not run", errored)
	}
	fmt.Fprintln(w, summary)
}

func (c Coverage) missing() string {
	switch {
	case c.Positive == 0 && c.Negative == 0:
		return "no test"
	case c.Positive == 0:
		return "no test that expects findings"
	case c.Negative == 0:
		return "no test that expects none (expect: [])"
	}
	return ""
}

// maxShownRows bounds the rows a failure prints; the JSON report has them all.
const maxShownRows = 20

func writeRows(w io.Writer, what string, rows []string) {
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(w, "        %s:\n", what)
	for i, row := range rows {
		if i == maxShownRows {
			fmt.Fprintf(w, "          … and %d more\n", len(rows)-i)
			break
		}
		fmt.Fprintf(w, "          %s\n", row)
	}
}

// Incomplete lists the hunts that lack a positive or a negative test.
func (r *Report) Incomplete() []Coverage {
	var out []Coverage
	for _, c := range r.Coverage {
		if !c.Complete() {
			out = append(out, c)
		}
	}
	return out
}

type jsonResult struct {
	File       string   `json:"file"`
	Line       int      `json:"line"`
	Hunt       string   `json:"hunt"`
	Name       string   `json:"name"`
	Status     Status   `json:"status"`
	Seconds    float64  `json:"seconds"`
	Found      int      `json:"found"`
	Missing    []string `json:"missing,omitempty"`
	Unexpected []string `json:"unexpected,omitempty"`
	Error      string   `json:"error,omitempty"`
}

// WriteJSON writes the report for machines: tests, problems, coverage and counts.
func (r *Report) WriteJSON(w io.Writer) error {
	out := struct {
		Tests    []jsonResult        `json:"tests"`
		Problems []configsrc.Problem `json:"problems"`
		Coverage []Coverage          `json:"coverage"`
		Passed   int                 `json:"passed"`
		Failed   int                 `json:"failed"`
		Errors   int                 `json:"errors"`
	}{Tests: []jsonResult{}, Problems: append([]configsrc.Problem{}, r.Problems...), Coverage: append([]Coverage{}, r.Coverage...)}
	out.Passed, out.Failed, out.Errors = r.Counts()
	for _, res := range r.Results {
		j := jsonResult{File: res.File, Line: res.Line, Hunt: res.Hunt, Name: res.Name, Status: res.Status,
			Seconds: res.Duration.Seconds(), Found: res.Found, Missing: res.Missing, Unexpected: res.Extra}
		if res.Problem != nil {
			j.Error = res.Problem.Error()
		}
		out.Tests = append(out.Tests, j)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// JUnit XML as CI systems read it (Jenkins, GitLab, GitHub test reporters): one suite per test
// file, one case per test; a file that could not be read is a suite with one erroring case.
type junitSuites struct {
	XMLName  xml.Name     `xml:"testsuites"`
	Tests    int          `xml:"tests,attr"`
	Failures int          `xml:"failures,attr"`
	Errors   int          `xml:"errors,attr"`
	Suites   []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name     string      `xml:"name,attr"`
	Tests    int         `xml:"tests,attr"`
	Failures int         `xml:"failures,attr"`
	Errors   int         `xml:"errors,attr"`
	Time     string      `xml:"time,attr"`
	Cases    []junitCase `xml:"testcase"`
}

type junitCase struct {
	Name      string        `xml:"name,attr"`
	Classname string        `xml:"classname,attr"`
	File      string        `xml:"file,attr,omitempty"`
	Line      int           `xml:"line,attr,omitempty"`
	Time      string        `xml:"time,attr"`
	Failure   *junitMessage `xml:"failure"`
	Error     *junitMessage `xml:"error"`
}

type junitMessage struct {
	Message string `xml:"message,attr"`
	Text    string `xml:",chardata"`
}

// WriteJUnit writes the report as JUnit XML.
func (r *Report) WriteJUnit(w io.Writer) error {
	var out junitSuites
	index := map[string]int{}
	suite := func(file string) *junitSuite {
		i, ok := index[file]
		if !ok {
			i = len(out.Suites)
			index[file] = i
			out.Suites = append(out.Suites, junitSuite{Name: file})
		}
		return &out.Suites[i]
	}
	inResults := map[configsrc.Problem]bool{}
	secs := map[string]float64{}
	for _, res := range r.Results {
		s := suite(res.File)
		c := junitCase{Name: res.Name, Classname: res.Hunt, File: res.File, Line: res.Line, Time: fmt.Sprintf("%.3f", res.Duration.Seconds())}
		secs[res.File] += res.Duration.Seconds()
		switch res.Status {
		case Fail:
			var b strings.Builder
			writeRows(&b, "missing (expected, not found)", res.Missing)
			writeRows(&b, "unexpected (found, not expected)", res.Extra)
			c.Failure = &junitMessage{Message: "findings differ from expect", Text: b.String()}
			s.Failures++
		case Error:
			inResults[*res.Problem] = true
			c.Error = &junitMessage{Message: res.Problem.Message, Text: res.Problem.Error()}
			s.Errors++
		}
		s.Tests++
		s.Cases = append(s.Cases, c)
	}
	for _, p := range r.Problems {
		if inResults[p] {
			continue
		}
		s := suite(p.File)
		s.Tests++
		s.Errors++
		s.Cases = append(s.Cases, junitCase{Name: fmt.Sprintf("line %d", p.Line), Classname: "hunt-runner test", File: p.File,
			Line: p.Line, Time: "0", Error: &junitMessage{Message: p.Message, Text: p.Error()}})
	}
	for i := range out.Suites {
		s := &out.Suites[i]
		s.Time = fmt.Sprintf("%.3f", secs[s.Name])
		out.Tests += s.Tests
		out.Failures += s.Failures
		out.Errors += s.Errors
	}
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(out); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\n")
	return err
}
