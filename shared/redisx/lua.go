package redisx

import (
	"io/fs"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Lua names one embedded .lua file: a module (local functions a script calls) or a script.
type Lua struct {
	FS   fs.FS
	Name string
}

// Script joins .lua files into one script, in order: a file may call what the files
// before it define, so modules come first and the script itself last. Redis runs one
// source per script, so this is how every script of Trawl is built from its files. A
// missing file panics: the files are embedded, so that is a build mistake, caught by any
// test that loads the package.
func Script(files ...Lua) *redis.Script {
	var b strings.Builder
	for _, f := range files {
		src, err := fs.ReadFile(f.FS, f.Name)
		if err != nil {
			panic("redisx: lua file " + f.Name + ": " + err.Error())
		}
		b.Write(src)
		b.WriteByte('\n')
	}
	return redis.NewScript(b.String())
}
