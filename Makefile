# The two commands of README.md. Both set up everything on a fresh machine.
VENV ?= .venv
PYTHON ?= python3
STAMP := $(VENV)/.installed
# Apache Kafka's jars for the tests (tests/apache_kafka.py), from Maven Central by mvn.
KAFKA_JARS := tests/jars/kafka/lib
KAFKA_STAMP := $(KAFKA_JARS)/.fetched
# The Iceberg REST catalog server of the tests (tests/rest_catalog.py), by mvn.
NESSIE_JAR := tests/jars/nessie/lib/nessie-quarkus-0.99.0-runner.jar
# Kafka Connect with Debezium's PostgreSQL connector, for the change data end-to-end test
# (tests/debezium_connect.py, `make cdc-e2e`), by mvn.
DEBEZIUM_JARS := tests/jars/debezium/lib
DEBEZIUM_STAMP := $(DEBEZIUM_JARS)/.fetched

.PHONY: demo test test-fast lint setup jars kafka-jars peer-jars tools debezium-jars cdc-e2e \
	system-deps jvm-archives examples

# The steps a command needs run side by side where they do not depend on each other (pip
# beside the Maven and Go fetches; ruff and mypy beside the jars, the tools and the JVMs'
# class-data archives): on a fresh clone `make test` reaches pytest about a minute sooner.
MAKEFLAGS += --jobs=4

# The Debian packages, once per make (every step that needs one waits for it: two
# apt-get runs at once would fight over dpkg's lock).
system-deps:
	bash .ci/system-deps

# The virtualenv is filled by uv (pinned, installed into it by pip): the same packages as
# pip resolves (compared with `pip freeze`), in less time on the 2-core machine (2026-12-02,
# quiet, warm caches, the venv made and filled: pip 56.5 s, uv 44.6 s; in a fresh clone's
# CI run the step ended 39 s sooner), which is the head of `make test`'s critical path. Bytecode is compiled at install as pip does, so that no
# process compiles a module at every start where PYTHONDONTWRITEBYTECODE is set. uv does
# not read pip's configuration: pip's extra wheel directories are passed on.
UV_VERSION := 0.13.8
UV := $(VENV)/bin/uv pip install -q --python $(VENV)/bin/python --compile-bytecode \
	$(foreach links,$(PIP_FIND_LINKS),--find-links $(links))

$(STAMP): pyproject.toml .ci/system-deps | system-deps
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q uv==$(UV_VERSION)
	$(UV) -e '.[dev,spark]'
	touch $(STAMP)

setup: $(STAMP)

$(KAFKA_STAMP): tests/jars/kafka/pom.xml .ci/system-deps | system-deps
	rm -rf $(KAFKA_JARS)
	mvn -q -B -f tests/jars/kafka/pom.xml dependency:copy-dependencies -DoutputDirectory=$(CURDIR)/$(KAFKA_JARS)
	touch $(KAFKA_STAMP)

kafka-jars: $(KAFKA_STAMP)

$(DEBEZIUM_STAMP): tests/jars/debezium/pom.xml .ci/system-deps | system-deps
	rm -rf $(DEBEZIUM_JARS)
	mvn -q -B -f tests/jars/debezium/pom.xml dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory=$(CURDIR)/$(DEBEZIUM_JARS)
	touch $(DEBEZIUM_STAMP)

debezium-jars: $(DEBEZIUM_STAMP)

# The peers of bench/peers/ (Spark's Kafka source and Avro functions; Kafka Connect and
# Apache Iceberg's sink connector), from Maven Central by mvn, one pinned POM per set.
PEER_SETS := spark connect iceberg-sink
PEER_STAMPS := $(PEER_SETS:%=bench/peers/jars/%/lib/.fetched)

bench/peers/jars/%/lib/.fetched: bench/peers/jars/%/pom.xml .ci/system-deps | system-deps
	rm -rf bench/peers/jars/$*/lib
	mvn -q -B -f bench/peers/jars/$*/pom.xml dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory=$(CURDIR)/bench/peers/jars/$*/lib
	touch $@

peer-jars: $(PEER_STAMPS)

# The JVM jars of the Spark session (Iceberg runtime, AWS bundle, JDBC drivers), from
# Maven Central through mvn and the pinned actors/sinks/spark/pom.xml; each checked by its
# SHA-256. And kstage's commit fence, built from actors/sinks/spark/fence by mvn (a JDK).
# Quick when they are there already.
jars: $(STAMP)
	$(VENV)/bin/kstage jars fetch

$(NESSIE_JAR): tests/jars/nessie/pom.xml .ci/system-deps | system-deps
	mvn -q -B -f tests/jars/nessie/pom.xml dependency:copy-dependencies -DoutputDirectory=$(CURDIR)/tests/jars/nessie/lib
	touch $(NESSIE_JAR)

# The Helm chart's checks (tests/unit/test_helm_chart.py): helm and kubeconform built from
# the Go module proxy by `go install` into .tools/bin, and the CRDs of the chart's optional
# objects (KEDA's ScaledObject, prometheus-operator's ServiceMonitor) from those projects'
# Go modules into .tools/crds, with the source of KEDA's kafka scaler (the names of its
# trigger metadata). One stamp per set of versions: quick when they are there.
GO ?= $(or $(shell command -v go 2>/dev/null),/usr/local/go/bin/go)
TOOLS := .tools
HELM_VERSION := v3.22.0
KUBECONFORM_VERSION := v0.8.0
KEDA_VERSION := v2.21.0
PROMETHEUS_OPERATOR_VERSION := v0.85.0
TOOLS_STAMP := $(TOOLS)/.installed-helm-$(HELM_VERSION)-kubeconform-$(KUBECONFORM_VERSION)-keda-$(KEDA_VERSION)-prometheus-operator-$(PROMETHEUS_OPERATOR_VERSION)
# The directory of a module in Go's module cache (downloaded from the proxy when missing).
go_module_dir = $$($(GO) mod download -json $(1) | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$$/\1/p')

$(TOOLS_STAMP): | system-deps
	rm -rf $(TOOLS)/bin $(TOOLS)/crds $(TOOLS)/.installed-*
	mkdir -p $(TOOLS)/bin $(TOOLS)/crds
	GOBIN=$(CURDIR)/$(TOOLS)/bin $(GO) install helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)
	GOBIN=$(CURDIR)/$(TOOLS)/bin $(GO) install github.com/yannh/kubeconform/cmd/kubeconform@$(KUBECONFORM_VERSION)
	keda=$(call go_module_dir,github.com/kedacore/keda/v2@$(KEDA_VERSION)) \
	  && install -m 644 "$$keda/config/crd/bases/keda.sh_scaledobjects.yaml" $(TOOLS)/crds/ \
	  && install -m 644 "$$keda/pkg/scalers/kafka_scaler.go" $(TOOLS)/crds/keda_kafka_scaler.go
	operator=$(call go_module_dir,github.com/prometheus-operator/prometheus-operator@$(PROMETHEUS_OPERATOR_VERSION)) \
	  && install -m 644 "$$operator/example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml" $(TOOLS)/crds/
	touch $@

tools: $(TOOLS_STAMP)

demo: jars
	$(VENV)/bin/kstage demo

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

# The class-data archives of the suite's Spark JVMs and Apache Kafka nodes
# (tests/jvm_archive.py), made before pytest so that its workers do not wait for them.
jvm-archives: jars $(KAFKA_STAMP)
	$(VENV)/bin/python -m tests.make_jvm_archives

# The example plugins, installed as a plugin author would (an editable install: its
# entry points registered in the virtualenv) and tested with their own tests: before
# pytest, beside the archives (after mypy, which must not read the virtualenv while it is
# written). uv: 1.4 s an example, pip 4.4 s.
EXAMPLES := kstage-example-plugin kstage-example-sink kstage-example-token-provider
examples: lint
	for example in $(EXAMPLES); do \
	  $(UV) -e examples/$$example && \
	  $(VENV)/bin/pytest examples/$$example/tests || exit 1; \
	done

# out/junit.xml: each test's seconds, to refresh tests/file_durations.py from.
test: lint jars tools $(NESSIE_JAR) $(KAFKA_STAMP) $(PEER_STAMPS) jvm-archives examples
	$(VENV)/bin/pytest -m "not cdc" --junitxml=out/junit.xml

# The edit-run loop, about 5 minutes on the 2-core machine: ruff, mypy, and the unit,
# actor and behaviour tests not marked slow on the embedded broker (the fake consumer
# and Tansu; no Apache Kafka JVM, no kstage process driven through a fault). `make test`
# before a merge runs everything: the integration and slow tests on both brokers.
FAST_TESTS := tests/unit tests/actors tests/behaviour
test-fast: lint jars tools
	$(VENV)/bin/pytest -m "not slow and not apache_kafka" $(FAST_TESTS)

# Change data capture end to end with Debezium itself (PostgreSQL -> Debezium in Kafka
# Connect -> both brokers -> kstage -> JDBC upsert and Iceberg final tables, kstage killed
# midway): three JVMs at once, a few minutes, so apart from `make test`.
cdc-e2e: lint jars $(KAFKA_STAMP) $(DEBEZIUM_STAMP)
	$(VENV)/bin/pytest -m cdc -n 0 tests/integration/test_debezium_cdc.py
