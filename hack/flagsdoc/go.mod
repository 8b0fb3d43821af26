module github.com/loraplane/loraplane/hack/flagsdoc

go 1.26.7
