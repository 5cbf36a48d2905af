package b

import "testing"

func Fuzz(f *testing.F) {}
