package a

import "testing"

func FuzzOne(f *testing.F)       {}
func FuzzTwo(f *testing.F)       {}
func Fuzzy(f *testing.F)         {}
func FuzzNotF(t *testing.T)      {}
func TestSomething(t *testing.T) {}

type x struct{}

func (x) FuzzMethod(f *testing.F) {}
