// Package netplugin is the CNI plugin buildkitd runs for every network
// namespace of a RUN step. It decides nothing itself: it forwards the CNI
// call over a unix socket to the envd node that started buildkitd, which
// attaches the namespace to the instances' bridge under the egress policy
// of the build that asked (package buildkit, runtime.AttachNetNS) or
// leaves it with loopback only. It is a mode of the static envd-agent
// binary (linked under the name Type), so it needs no install of its own,
// and it depends on the standard library only.
package netplugin

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"
)

// Type is the plugin's name in a CNI configuration and its file name in
// the CNI binary directory.
const Type = "envd-build-net"

// HostnameArg is the CNI argument in which BuildKit passes a RUN step's
// host name (set per build with the frontend's hostname option): the
// name of the build's grant.
const HostnameArg = "K8S_POD_NAME"

// Request is one CNI call as the plugin forwards it.
type Request struct {
	Command     string `json:"command"` // ADD, DEL or CHECK
	ContainerID string `json:"container_id"`
	Netns       string `json:"netns"`
	IfName      string `json:"ifname"`
	Hostname    string `json:"hostname"` // "" when BuildKit gave none
}

// Reply is the node's answer: a CNI result (ADD) or an error.
type Reply struct {
	Result json.RawMessage `json:"result,omitempty"`
	Error  string          `json:"error,omitempty"`
}

// conf is the part of the network configuration the plugin reads.
type conf struct {
	CNIVersion string `json:"cniVersion"`
	Socket     string `json:"socket"`
}

// timeout bounds a call: attaching takes a CNI ADD and an iptables batch.
const timeout = 2 * time.Minute

// Main runs the plugin with the CNI environment and configuration on
// stdin; it answers the process's exit code.
func Main() int {
	cmd := os.Getenv("CNI_COMMAND")
	raw, _ := io.ReadAll(io.LimitReader(os.Stdin, 1<<20))
	var c conf
	_ = json.Unmarshal(raw, &c)
	if c.CNIVersion == "" {
		c.CNIVersion = "1.0.0"
	}
	switch cmd {
	case "VERSION":
		fmt.Printf(`{"cniVersion":%q,"supportedVersions":["0.4.0","1.0.0","1.1.0"]}`+"\n", c.CNIVersion)
		return 0
	case "STATUS", "GC":
		return 0
	case "ADD", "DEL", "CHECK":
	default:
		return fail(c.CNIVersion, 4, fmt.Sprintf("unknown CNI_COMMAND %q", cmd))
	}
	req := Request{Command: cmd, ContainerID: os.Getenv("CNI_CONTAINERID"), Netns: os.Getenv("CNI_NETNS"),
		IfName: os.Getenv("CNI_IFNAME"), Hostname: cniArg(os.Getenv("CNI_ARGS"), HostnameArg)}
	if req.Hostname == "" {
		// Not a build with a grant (BuildKit's pooled namespaces): the
		// namespace keeps loopback only, and there is nothing to undo.
		if cmd == "ADD" {
			fmt.Printf(`{"cniVersion":%q}`+"\n", c.CNIVersion)
		}
		return 0
	}
	if c.Socket == "" {
		return fail(c.CNIVersion, 7, "no socket in the network configuration")
	}
	rep, err := call(c.Socket, req)
	if err != nil {
		return fail(c.CNIVersion, 11, err.Error())
	}
	if rep.Error != "" {
		return fail(c.CNIVersion, 11, rep.Error)
	}
	if cmd == "ADD" {
		os.Stdout.Write(append(rep.Result, '\n'))
	}
	return 0
}

func call(socket string, req Request) (Reply, error) {
	conn, err := net.DialTimeout("unix", socket, 10*time.Second)
	if err != nil {
		return Reply{}, fmt.Errorf("envd node: %w", err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(timeout))
	if err := json.NewEncoder(conn).Encode(req); err != nil {
		return Reply{}, fmt.Errorf("envd node: %w", err)
	}
	var rep Reply
	if err := json.NewDecoder(bufio.NewReader(conn)).Decode(&rep); err != nil {
		return Reply{}, fmt.Errorf("envd node: no answer: %w", err)
	}
	return rep, nil
}

// cniArg is the value of key in CNI_ARGS ("K1=V1;K2=V2").
func cniArg(args, key string) string {
	for _, kv := range strings.Split(args, ";") {
		if k, v, ok := strings.Cut(kv, "="); ok && k == key {
			return v
		}
	}
	return ""
}

// fail prints a CNI error result and answers 1.
func fail(version string, code int, msg string) int {
	b, _ := json.Marshal(map[string]any{"cniVersion": version, "code": code, "msg": "envd build network: " + msg})
	os.Stdout.Write(append(b, '\n'))
	return 1
}
