# memfit: the two commands a user needs are `make run` and `make test`.
BUILD ?= build
JOBS ?= $(shell nproc)
DEB_PKGS := cmake g++ make libdnnl-dev dataset-fashion-mnist libgtest-dev googletest \
            zlib1g-dev libpng-dev libjpeg-dev python3-torch python3-numpy

.PHONY: deps build test run bench asan clean

deps:
	@missing=""; for p in $(DEB_PKGS); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "memfit: installing Debian packages:$$missing"; \
	  SUDO=""; [ "$$(id -u)" -ne 0 ] && SUDO=sudo; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	fi

$(BUILD)/Makefile: CMakeLists.txt
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release

build: deps $(BUILD)/Makefile
	cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure

run: build
	$(BUILD)/memfit train

bench: build
	/usr/bin/python3 bench/run.py --build $(BUILD)

asan: deps
	cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DMEMFIT_SANITIZE=ON
	cmake --build build-asan -j $(JOBS)
	cd build-asan && ctest --output-on-failure

clean:
	rm -rf $(BUILD) build-asan
