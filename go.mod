module github.com/gostore/gostore

go 1.26.8

require (
	github.com/NVIDIA/go-nvml v0.13.4-1
	github.com/go-zeromq/zmq4 v0.17.0
	github.com/pawelgaczynski/giouring v0.0.0-20230826085535-69588b89acb9
	github.com/prometheus/client_golang v1.23.2
	github.com/prometheus/client_model v0.6.2
	github.com/vmihailenco/msgpack/v5 v5.4.1
	go.yaml.in/yaml/v2 v2.4.2
	golang.org/x/sys v0.38.0
)

require (
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/go-zeromq/goczmq/v4 v4.2.2 // indirect
	github.com/kr/text v0.2.0 // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/prometheus/common v0.66.1 // indirect
	github.com/prometheus/procfs v0.16.1 // indirect
	github.com/vmihailenco/tagparser/v2 v2.0.0 // indirect
	golang.org/x/sync v0.16.0 // indirect
	golang.org/x/text v0.28.0 // indirect
	google.golang.org/protobuf v1.36.8 // indirect
)
