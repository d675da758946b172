# The two commands of README.md. Both set up everything on a fresh machine.
VENV ?= .venv
PYTHON ?= python3
STAMP := $(VENV)/.installed
# Apache Kafka's jars for the tests (tests/apache_kafka.py), from Maven Central by mvn.
KAFKA_JARS := tests/jars/kafka/lib
KAFKA_STAMP := $(KAFKA_JARS)/.fetched
# The Iceberg REST catalog server of the tests (tests/rest_catalog.py), by mvn.
NESSIE_JAR := tests/jars/nessie/lib/nessie-quarkus-0.99.0-runner.jar

.PHONY: demo test lint setup jars kafka-jars peer-jars

$(STAMP): pyproject.toml .ci/system-deps
	bash .ci/system-deps
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[dev,spark]'
	touch $(STAMP)

setup: $(STAMP)

$(KAFKA_STAMP): tests/jars/kafka/pom.xml .ci/system-deps
	bash .ci/system-deps
	rm -rf $(KAFKA_JARS)
	mvn -q -B -f tests/jars/kafka/pom.xml dependency:copy-dependencies -DoutputDirectory=$(CURDIR)/$(KAFKA_JARS)
	touch $(KAFKA_STAMP)

kafka-jars: $(KAFKA_STAMP)

# The peers of bench/peers/ (Spark's Kafka source and Avro functions; Kafka Connect and
# Apache Iceberg's sink connector), from Maven Central by mvn, one pinned POM per set.
PEER_SETS := spark connect iceberg-sink
PEER_STAMPS := $(PEER_SETS:%=bench/peers/jars/%/lib/.fetched)

bench/peers/jars/%/lib/.fetched: bench/peers/jars/%/pom.xml .ci/system-deps
	bash .ci/system-deps
	rm -rf bench/peers/jars/$*/lib
	mvn -q -B -f bench/peers/jars/$*/pom.xml dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory=$(CURDIR)/bench/peers/jars/$*/lib
	touch $@

peer-jars: $(PEER_STAMPS)

# The JVM jars of the Spark session (Iceberg runtime, AWS bundle, JDBC drivers), from
# Maven Central through mvn and the pinned actors/sinks/spark/pom.xml; each checked by its
# SHA-256. Quick when they are there already.
jars: $(STAMP)
	$(VENV)/bin/kstage jars fetch

$(NESSIE_JAR): tests/jars/nessie/pom.xml .ci/system-deps
	bash .ci/system-deps
	mvn -q -B -f tests/jars/nessie/pom.xml dependency:copy-dependencies -DoutputDirectory=$(CURDIR)/tests/jars/nessie/lib
	touch $(NESSIE_JAR)

demo: jars
	$(VENV)/bin/kstage demo

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

test: lint jars $(NESSIE_JAR) $(KAFKA_STAMP) $(PEER_STAMPS)
	$(VENV)/bin/pytest
	$(VENV)/bin/pip install -q -e examples/kstage-example-plugin
	$(VENV)/bin/pytest examples/kstage-example-plugin/tests
	$(VENV)/bin/pip install -q -e examples/kstage-example-sink
	$(VENV)/bin/pytest examples/kstage-example-sink/tests
	$(VENV)/bin/pip install -q -e examples/kstage-example-token-provider
	$(VENV)/bin/pytest examples/kstage-example-token-provider/tests
