package c

import "testing"

func FuzzIgnored(f *testing.F) {}
