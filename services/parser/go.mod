module github.com/trawl/trawl/services/parser

go 1.26

require github.com/trawl/trawl/shared v0.0.0

replace github.com/trawl/trawl/shared => ../../shared
