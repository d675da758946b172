# kstage service image. Build: docker build -t kstage .
# Run:   docker run --rm -e KAFKA_BOOTSTRAP=host:9092 -v $PWD/kstage.yml:/etc/kstage/kstage.yml:ro kstage
# Debian bookworm: the last Debian with OpenJDK 17, the JRE PySpark (the `spark` extra) needs.
FROM python:3.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# slim images lack /usr/share/man/man1, which the JRE's postinst writes to.
RUN mkdir -p /usr/share/man/man1 \
 && apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /app
COPY pyproject.toml README.md ./
COPY service service
COPY actors actors
COPY processors processors
COPY settings settings
RUN pip install '.[spark,otel,protobuf,jsonschema]'   # Spark and JDBC sinks: pyspark + pyarrow; tracing: otel; format: protobuf, json_schema

# The pinned JVM jars of the Spark session (Iceberg's Spark runtime and AWS bundle, the
# SQLite and PostgreSQL JDBC drivers), fetched at build time from Maven Central and
# checked against their SHA-256 (actors/sinks/spark/jars.py); never at run time. Beside
# them kstage's commit fence, built from its sources by mvn: Maven and a JDK are installed
# for this step only.
ENV KSTAGE_JARS_DIR=/opt/kstage/jars
RUN apt-get update \
 && apt-get install -y --no-install-recommends maven openjdk-17-jdk-headless \
 && kstage jars fetch \
 && apt-get purge -y --auto-remove maven openjdk-17-jdk-headless \
 && rm -rf /var/lib/apt/lists/* /root/.m2

# Non-root; /data is the working directory, so relative sink and dead-letter paths
# (out/..., failed_events.log) are writable, and a named volume mounted there is too.
RUN useradd --system --uid 10001 --user-group --home-dir /data --shell /usr/sbin/nologin kstage \
 && mkdir -p /data /etc/kstage \
 && chown kstage:kstage /data
COPY kstage.yml /etc/kstage/kstage.yml
COPY examples/configs /etc/kstage/examples
USER kstage
WORKDIR /data

# service.http_port: /healthz (event loop responsive), /readyz, /metrics.
# The status server binds loopback by default (it has no authentication); in a container
# loopback is unreachable from outside, so the image binds every interface of the
# container's own network namespace: publish 9108 only to networks you trust.
ENV KSTAGE_SERVICE__HTTP_HOST=0.0.0.0
EXPOSE 9108
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
  CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:9108/healthz', timeout=4)"]

ENTRYPOINT ["kstage"]
CMD ["run", "-c", "/etc/kstage/kstage.yml"]
