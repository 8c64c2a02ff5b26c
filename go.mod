module github.com/cellserver/cellserver

go 1.26.8

require (
	github.com/stretchr/testify v1.12.1
	github.com/tidwall/redcon v1.6.4
)

require (
	github.com/tidwall/btree v1.1.0 // indirect
	github.com/tidwall/match v1.1.1 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
)
