# kstage service image. Build: docker build -t kstage .
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY service service
COPY actors actors
COPY processors processors
COPY settings settings
RUN pip install --no-cache-dir .
COPY kstage.yml /etc/kstage/kstage.yml
ENTRYPOINT ["kstage"]
CMD ["run", "-c", "/etc/kstage/kstage.yml"]
