package configsrc

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// serveSSH runs a minimal git SSH server: public-key auth for one key, and "exec" of
// git-upload-pack on repositories under root, so the real git serves the fetch.
func serveSSH(t *testing.T, root string, authorized ssh.PublicKey) (addr string, hostKey ssh.PublicKey) {
	t.Helper()
	_, hostPriv, _ := ed25519.GenerateKey(rand.Reader)
	signer, err := ssh.NewSignerFromKey(hostPriv)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &ssh.ServerConfig{PublicKeyCallback: func(_ ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
		if bytes.Equal(key.Marshal(), authorized.Marshal()) {
			return nil, nil
		}
		return nil, errors.New("unknown key")
	}}
	cfg.AddHostKey(signer)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go serveSSHConn(c, cfg, root)
		}
	}()
	return ln.Addr().String(), signer.PublicKey()
}

func serveSSHConn(c net.Conn, cfg *ssh.ServerConfig, root string) {
	defer c.Close()
	_, chans, reqs, err := ssh.NewServerConn(c, cfg)
	if err != nil {
		return
	}
	go ssh.DiscardRequests(reqs)
	for nc := range chans {
		if nc.ChannelType() != "session" {
			nc.Reject(ssh.UnknownChannelType, "session only")
			continue
		}
		ch, chReqs, err := nc.Accept()
		if err != nil {
			return
		}
		go func() {
			defer ch.Close()
			for req := range chReqs {
				if req.Type != "exec" || len(req.Payload) < 4 {
					req.Reply(false, nil)
					continue
				}
				n := binary.BigEndian.Uint32(req.Payload)
				cmdline := string(req.Payload[4 : 4+n])
				verb, arg, _ := strings.Cut(cmdline, " ")
				if verb != "git-upload-pack" {
					req.Reply(false, nil)
					continue
				}
				req.Reply(true, nil)
				cmd := exec.Command("git", "upload-pack", filepath.Join(root, strings.Trim(arg, "'\"/")))
				cmd.Stdin, cmd.Stdout, cmd.Stderr = ch, ch, ch.Stderr()
				code := 0
				if err := cmd.Run(); err != nil {
					code = 1
				}
				ch.SendRequest("exit-status", false, ssh.Marshal(struct{ Code uint32 }{uint32(code)}))
				return
			}
		}()
	}
}

// TestGitSSH fetches over SSH with a key file and a known_hosts file, and refuses a server
// whose host key is not the one in known_hosts.
func TestGitSSH(t *testing.T) {
	repo := newGitRepo(t)
	c1 := repo.commit("v1", map[string]string{"hunts/a.yaml": huntYAML("5m", "v1")})

	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(t.TempDir(), "id_ed25519")
	writeFile(t, keyFile, string(pem.EncodeToMemory(block)))
	sshPub, _ := ssh.NewPublicKey(pub)
	addr, hostKey := serveSSH(t, repo.root, sshPub)
	_, port, _ := net.SplitHostPort(addr)
	knownHosts := filepath.Join(t.TempDir(), "known_hosts")
	writeFile(t, knownHosts, knownhosts.Line([]string{knownhosts.Normalize(addr)}, hostKey)+"\n")

	url := fmt.Sprintf("ssh://git@127.0.0.1:%s/origin.git", port)
	src, err := NewGit(GitOptions{URL: url, Path: "hunts", SSHKeyFile: keyFile, KnownHostsFile: knownHosts, CacheDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	set, err := src.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if set.Commit != c1 || ids(set) != "a" {
		t.Fatalf("commit %s (want %s), hunts %s", set.Commit, c1, ids(set))
	}

	// An impostor: same address, a host key known_hosts does not list.
	_, otherHost, _ := ed25519.GenerateKey(rand.Reader)
	otherPub, _ := ssh.NewPublicKey(otherHost.Public())
	writeFile(t, knownHosts, knownhosts.Line([]string{knownhosts.Normalize(addr)}, otherPub)+"\n")
	src, _ = NewGit(GitOptions{URL: url, SSHKeyFile: keyFile, KnownHostsFile: knownHosts, CacheDir: t.TempDir()})
	if _, err := src.Load(context.Background()); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "knownhosts") {
		t.Fatalf("host key mismatch: err = %v, want a knownhosts refusal", err)
	}
}
