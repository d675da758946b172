package io.kstage.iceberg;

import java.io.IOException;
import java.util.Map;
import org.apache.iceberg.exceptions.NotFoundException;
import org.apache.iceberg.io.InputFile;
import org.apache.iceberg.io.ResolvingFileIO;
import org.apache.iceberg.io.SeekableInputStream;

/**
 * The catalog's FileIO when {@code kstage.metadata-read-retries} is below Iceberg's own 20:
 * Iceberg's {@link ResolvingFileIO} (S3, HDFS, local files by scheme) whose reads of a
 * table metadata file ({@code *.metadata.json}) fail for good once one thread failed to
 * read the same file more than that many times in a row.
 *
 * <p>Iceberg retries reading a table's metadata file 20 times (about 90 s of backoff,
 * hard-coded in {@code BaseMetastoreTableOperations}) and stops early only on a {@link
 * NotFoundException}. So the last failure allowed is raised as one, whose message names
 * the file, the attempts and this setting, with the storage's error as its cause: the
 * load or refresh of the table fails after {@code retries + 1} attempts and the caller
 * (kstage's retry of the append) takes over. A successful read resets the count.
 */
public class BoundedMetadataReads extends ResolvingFileIO {
  public static final String RETRIES = "kstage.metadata-read-retries";
  /** Iceberg's own count (BaseMetastoreTableOperations.refreshFromMetadataLocation). */
  public static final int ICEBERG_RETRIES = 20;

  private static final ThreadLocal<Failures> FAILURES = ThreadLocal.withInitial(Failures::new);

  private int retries = ICEBERG_RETRIES;

  /** The failed reads in a row of one thread, and of which file. */
  private static final class Failures {
    private String location;
    private int count;
  }

  /** {@code kstage.metadata-read-retries} of {@code properties} (Iceberg's 20 if unset). */
  public static int retries(Map<String, String> properties) {
    String value = properties.get(RETRIES);
    if (value == null) {
      return ICEBERG_RETRIES;
    }
    int parsed;
    try {
      parsed = Integer.parseInt(value.strip());
    } catch (NumberFormatException e) {
      parsed = -1;
    }
    if (parsed < 0 || parsed > ICEBERG_RETRIES) {
      throw new IllegalArgumentException("kstage fence: " + RETRIES + " must be a whole number "
          + "from 0 to " + ICEBERG_RETRIES + " (Iceberg's own), not " + value);
    }
    return parsed;
  }

  @Override
  public void initialize(Map<String, String> properties) {
    super.initialize(properties);
    this.retries = retries(properties);
  }

  @Override
  public InputFile newInputFile(String location) {
    return bounded(super.newInputFile(location));
  }

  @Override
  public InputFile newInputFile(String location, long length) {
    return bounded(super.newInputFile(location, length));
  }

  private InputFile bounded(InputFile file) {
    if (retries >= ICEBERG_RETRIES || !file.location().endsWith(".metadata.json")) {
      return file;
    }
    return new BoundedFile(file, retries);
  }

  /** Counts a failed read of {@code location}; the exception to throw for it. */
  static RuntimeException failed(String location, int retries, Exception cause) {
    Failures failures = FAILURES.get();
    if (!location.equals(failures.location)) {
      failures.location = location;
      failures.count = 0;
    }
    failures.count += 1;
    if (failures.count <= retries) {
      return cause instanceof RuntimeException
          ? (RuntimeException) cause : new java.io.UncheckedIOException((IOException) cause);
    }
    int attempts = failures.count;
    failures.location = null;
    failures.count = 0;
    return new NotFoundException(cause, "kstage: table metadata %s unreadable after %d "
        + "attempts (%s=%d): %s", location, attempts, RETRIES, retries, cause.getMessage());
  }

  static void succeeded(String location) {
    Failures failures = FAILURES.get();
    if (location.equals(failures.location)) {
      failures.location = null;
      failures.count = 0;
    }
  }

  private static final class BoundedFile implements InputFile {
    private final InputFile file;
    private final int retries;

    BoundedFile(InputFile file, int retries) {
      this.file = file;
      this.retries = retries;
    }

    @Override
    public long getLength() {
      try {
        return file.getLength();
      } catch (RuntimeException e) {
        throw failed(file.location(), retries, e);
      }
    }

    @Override
    public SeekableInputStream newStream() {
      try {
        return new BoundedStream(file.newStream(), file.location(), retries);
      } catch (RuntimeException e) {
        throw failed(file.location(), retries, e);
      }
    }

    @Override
    public String location() {
      return file.location();
    }

    @Override
    public boolean exists() {
      return file.exists();
    }
  }

  private static final class BoundedStream extends SeekableInputStream {
    private final SeekableInputStream stream;
    private final String location;
    private final int retries;
    private boolean failed;

    BoundedStream(SeekableInputStream stream, String location, int retries) {
      this.stream = stream;
      this.location = location;
      this.retries = retries;
    }

    private IOException io(IOException e) {
      failed = true;
      RuntimeException thrown = failed(location, retries, e);
      if (thrown instanceof java.io.UncheckedIOException) {
        return e;
      }
      throw thrown;
    }

    private RuntimeException runtime(RuntimeException e) {
      failed = true;
      return failed(location, retries, e);
    }

    @Override
    public long getPos() throws IOException {
      return stream.getPos();
    }

    @Override
    public void seek(long newPos) throws IOException {
      stream.seek(newPos);
    }

    @Override
    public int read() throws IOException {
      try {
        return stream.read();
      } catch (IOException e) {
        throw io(e);
      } catch (RuntimeException e) {
        throw runtime(e);
      }
    }

    @Override
    public int read(byte[] buffer, int offset, int length) throws IOException {
      try {
        return stream.read(buffer, offset, length);
      } catch (IOException e) {
        throw io(e);
      } catch (RuntimeException e) {
        throw runtime(e);
      }
    }

    @Override
    public void close() throws IOException {
      stream.close();
      if (!failed) {
        succeeded(location);
      }
    }
  }
}
