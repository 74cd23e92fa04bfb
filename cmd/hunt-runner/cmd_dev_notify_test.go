package main

import (
	"bufio"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hunt-runner/hunt-runner/internal/chtest"
)

// freePort returns a loopback address nothing listens on right now.
func freePort(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// `hunt-runner dev`, as a user runs it: it prints the address of its local receiver, and
// notifications of committed runs arrive there and are printed.
func TestDevShowsNotificationsAtItsReceiver(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and starts the embedded engine")
	}
	lib := chtest.LibPath(t)
	bin := filepath.Join(t.TempDir(), "hunt-runner")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	recvAddr := freePort(t)
	cmd := exec.Command(bin, "dev", "--hunts-dir", "../../examples/hunts", "--clickhouse-listen", freePort(t),
		"--listen", freePort(t), "--shim-listen", "", "--receiver-listen", recvAddr)
	cmd.Env = append(os.Environ(), "CHDB_LIB_PATH="+lib)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGINT)
		_ = cmd.Wait()
	}()
	lines := make(chan string, 1000)
	go func() {
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			lines <- s.Text()
		}
		close(lines)
	}()
	note := regexp.MustCompile(`✉ notification: (\S+) fire \S+, ([1-9][0-9]*) finding\(s\).*Idempotency-Key hr1-[0-9a-f]{32}`)
	var seen []string
	sawAddr := false
	deadline := time.After(3 * time.Minute)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("dev exited before a notification arrived:\n%s", strings.Join(seen, "\n"))
			}
			seen = append(seen, l)
			if strings.Contains(l, "notification receiver at http://"+recvAddr+"/") {
				sawAddr = true
			}
			if note.MatchString(l) {
				if !sawAddr {
					t.Errorf("a notification arrived, but the receiver's address was not printed first:\n%s", strings.Join(seen, "\n"))
				}
				return
			}
		case <-deadline:
			t.Fatalf("no notification within 3 minutes:\n%s", strings.Join(seen, "\n"))
		}
	}
}
