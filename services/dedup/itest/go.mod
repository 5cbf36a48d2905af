module github.com/trawl/trawl/services/dedup/itest

go 1.26

require (
	github.com/trawl/trawl/devstack v0.0.0
	github.com/trawl/trawl/services/dedup v0.0.0
	github.com/trawl/trawl/shared v0.0.0
)

replace (
	github.com/trawl/trawl/devstack => ../../../devstack
	github.com/trawl/trawl/services/dedup => ../
	github.com/trawl/trawl/shared => ../../../shared
)
