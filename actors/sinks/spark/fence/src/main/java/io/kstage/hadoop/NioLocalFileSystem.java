package io.kstage.hadoop;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.attribute.PosixFilePermission;
import java.util.EnumSet;
import java.util.Set;
import org.apache.hadoop.fs.LocalFileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.permission.FsPermission;
import org.apache.hadoop.io.nativeio.NativeIO;

/**
 * Hadoop's local file system (checksum files included, as Hadoop's own {@link
 * LocalFileSystem}) whose permission changes are made by Java ({@link
 * Files#setPosixFilePermissions}) rather than by a {@code chmod} process.
 *
 * <p>Without Hadoop's native library (PySpark ships none), {@link RawLocalFileSystem}
 * sets the mode of every file and directory it creates by starting {@code chmod}: about
 * ten processes per Iceberg append to a local warehouse (the data file, the manifest, the
 * manifest list, the metadata file, their checksum files, new directories), each forked
 * from the JVM. kstage's session uses this class for {@code file:} paths in local mode
 * ({@code fs.file.impl}). The modes are the same; a mode Java cannot set (sticky, setuid
 * or setgid bits), a file system without POSIX permissions, or Hadoop's native library
 * loaded go to Hadoop's own code.
 */
public class NioLocalFileSystem extends LocalFileSystem {
  public NioLocalFileSystem() {
    super(new Raw());
  }

  /** The raw file system underneath the checksums. */
  public static class Raw extends RawLocalFileSystem {
    @Override
    public void setPermission(Path path, FsPermission permission) throws IOException {
      short mode = permission.toShort();
      if ((mode & ~0777) != 0 || NativeIO.isAvailable()) {
        super.setPermission(path, permission);
        return;
      }
      java.nio.file.Path file = pathToFile(path).toPath();
      try {
        Files.setPosixFilePermissions(file, posix(mode));
      } catch (UnsupportedOperationException notPosix) {
        super.setPermission(path, permission);
      }
    }
  }

  private static final PosixFilePermission[] BITS = {  // from 0400 down to 0001
    PosixFilePermission.OWNER_READ, PosixFilePermission.OWNER_WRITE,
    PosixFilePermission.OWNER_EXECUTE, PosixFilePermission.GROUP_READ,
    PosixFilePermission.GROUP_WRITE, PosixFilePermission.GROUP_EXECUTE,
    PosixFilePermission.OTHERS_READ, PosixFilePermission.OTHERS_WRITE,
    PosixFilePermission.OTHERS_EXECUTE};

  /** The permissions of a mode of nine bits (rwxrwxrwx). */
  static Set<PosixFilePermission> posix(short mode) {
    Set<PosixFilePermission> set = EnumSet.noneOf(PosixFilePermission.class);
    for (int i = 0; i < BITS.length; i++) {
      if ((mode & (0400 >> i)) != 0) {
        set.add(BITS[i]);
      }
    }
    return set;
  }
}
