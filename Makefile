# lares: two commands for a fresh Debian machine (see README.md)
#   make run    install what is missing, build, generate text with the default model
#   make test   install what is missing, build and run every test (optimised + ASan/UBSan)

BUILD ?= build
CMAKE_FLAGS ?=

.PHONY: all deps build run test clean

all: build

deps:
	@scripts/deps.sh

build: deps
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD)

run: build
	@scripts/run_default.sh $(BUILD)/lares

test: deps
	@scripts/test.sh

clean:
	rm -rf build build-asan build-aarch64
