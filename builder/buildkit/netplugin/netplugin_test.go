package netplugin

import (
	"encoding/json"
	"net"
	"path/filepath"
	"testing"
)

func TestCNIArg(t *testing.T) {
	args := "IgnoreUnknown=1;K8S_POD_NAME=envd-build-abc;K=v=w"
	if got := cniArg(args, HostnameArg); got != "envd-build-abc" {
		t.Fatalf("hostname %q", got)
	}
	if got := cniArg(args, "K"); got != "v=w" {
		t.Fatalf("K %q", got)
	}
	if got := cniArg("", HostnameArg); got != "" {
		t.Fatalf("empty args gave %q", got)
	}
}

// call sends the request as one JSON value and reads the node's answer.
func TestCallRoundTrip(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "net.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	got := make(chan Request, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		var req Request
		_ = json.NewDecoder(c).Decode(&req)
		got <- req
		_ = json.NewEncoder(c).Encode(Reply{Result: json.RawMessage(`{"cniVersion":"1.0.0"}`)})
	}()
	rep, err := call(sock, Request{Command: "ADD", ContainerID: "abc", Netns: "/x/abc", IfName: "eth0", Hostname: "h"})
	if err != nil {
		t.Fatal(err)
	}
	if string(rep.Result) != `{"cniVersion":"1.0.0"}` {
		t.Fatalf("result %s", rep.Result)
	}
	if req := <-got; req.ContainerID != "abc" || req.Netns != "/x/abc" || req.Hostname != "h" {
		t.Fatalf("request %+v", req)
	}
	if _, err := call(filepath.Join(t.TempDir(), "none.sock"), Request{Command: "ADD"}); err == nil {
		t.Fatal("a missing socket is an error")
	}
}
