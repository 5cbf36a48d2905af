package a

import "testing"

func FuzzInNonTestFile(f *testing.F) {}
