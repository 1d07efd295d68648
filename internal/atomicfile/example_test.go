package atomicfile_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/skiff-sdn/skiff/internal/atomicfile"
)

func ExampleWriteWith() {
	dir, err := os.MkdirTemp("", "atomicfile")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	conf := filepath.Join(dir, "net.d")
	if err := atomicfile.WriteWith(conf, "10-skiff.conflist", []byte("{}\n"), atomicfile.Options{Perm: 0o644, DirPerm: 0o755}); err != nil {
		panic(err)
	}
	st, err := os.Stat(filepath.Join(conf, "10-skiff.conflist"))
	if err != nil {
		panic(err)
	}
	fmt.Println(st.Mode())
	// Output: -rw-r--r--
}
