package localstore

import (
	"os"
	"strconv"
)

func fdPath(fd int) string {
	p, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil {
		return "?" + err.Error()
	}
	return p
}
