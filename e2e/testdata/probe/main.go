// Command probe tries, from inside an instance, what a hostile tenant
// would: each subcommand prints "allowed" and exits 0 when the kernel lets
// it through, or "refused: ERR" and exits 3. "hog MB" holds MB of touched
// memory until killed. Built static by the e2e tests
// (CGO_ENABLED=0 -ldflags '-s -w') and put in a busybox image.
package main

import (
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"
	"unsafe"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: probe unshare-user|keyctl|raw-socket|mknod-block|hog MB")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "unshare-user":
		err = syscall.Unshare(syscall.CLONE_NEWUSER)
	case "keyctl":
		// KEYCTL_GET_KEYRING_ID (0) of the session keyring (-3), create.
		_, _, e := syscall.Syscall6(syscall.SYS_KEYCTL, 0, uintptr(0xfffffffd), 1, 0, 0, 0)
		if e != 0 {
			err = e
		}
	case "raw-socket":
		var fd int
		fd, err = syscall.Socket(syscall.AF_INET, syscall.SOCK_RAW, syscall.IPPROTO_ICMP)
		if err == nil {
			syscall.Close(fd)
		}
	case "mknod-block":
		err = syscall.Mknod("/tmp/probe-sda", syscall.S_IFBLK|0o600, 8<<8)
	case "hog":
		mb, _ := strconv.Atoi(os.Args[2])
		buf := make([]byte, mb<<20)
		for i := 0; i < len(buf); i += 4096 {
			buf[i] = 1
		}
		fmt.Println("holding", mb, "MB")
		for {
			time.Sleep(time.Hour)
			_ = unsafe.Pointer(&buf[0])
		}
	default:
		fmt.Fprintln(os.Stderr, "unknown probe", os.Args[1])
		os.Exit(2)
	}
	if err != nil {
		fmt.Println("refused:", err)
		os.Exit(3)
	}
	fmt.Println("allowed")
}
