package io.kstage.iceberg;

import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import org.apache.iceberg.DataFile;
import org.apache.iceberg.DeleteFile;
import org.apache.iceberg.ManifestFile;
import org.apache.iceberg.MetadataUpdate;
import org.apache.iceberg.Snapshot;
import org.apache.iceberg.TableMetadata;
import org.apache.iceberg.io.FileIO;
import org.apache.iceberg.shaded.com.fasterxml.jackson.databind.node.ObjectNode;
import org.apache.iceberg.util.JsonUtil;

/**
 * The {@code kstage.offsets} of a staging append, carried forward from the metadata the
 * commit is actually applied on.
 *
 * <p>An append records every partition's offset in its snapshot (its own partitions, those
 * of {@code kstage.expect}, and the current snapshot's others, carried forward), so the
 * newest snapshot alone holds them all: a REST catalog may serve the current snapshot only.
 * The writer computes that value before the commit, from the table as it read it; Spark
 * sets it once, as a snapshot property, and Iceberg's optimistic retry after a conflict
 * (another writer's commit, a 409) applies the same summary on the refreshed base. The
 * other writer's offsets would leave the current snapshot. {@link #onto} makes the value
 * again on the base the commit is applied on: the base's current {@code kstage.offsets},
 * with the append's own partitions (the higher of each), the rule of kstage's {@code
 * actors.sinks.spark.iceberg.carried}. A snapshot that records no offsets (a compaction's
 * rewrite, a manifest rewrite, a DELETE) gets the base's current ones: otherwise, on a
 * catalog that serves the current snapshot only, the table would seem to hold no offsets
 * until maintenance recorded them again, and an append meanwhile would carry none.
 */
public final class CarriedOffsets {
  private CarriedOffsets() {}

  /**
   * {@code metadata} (a commit on top of {@code base}) with the {@code kstage.offsets} of
   * each snapshot it adds that carries {@code kstage.expect} made again on {@code base}
   * ({@link #merged}), and those of the base's current snapshot in each it adds that has
   * none (nor {@code kstage.offsets-reset}); {@code metadata} itself when nothing changes.
   */
  static TableMetadata onto(TableMetadata base, TableMetadata metadata) {
    if (base == null || !base.changes().isEmpty()) {
      // a new table, or a base that is not the catalog's (metadata's changes, which
      // begin with the base's own, are replayed on a base as the catalog holds it)
      return metadata;
    }
    Snapshot current = base.currentSnapshot();
    String recorded = current == null || current.summary() == null ? null
        : current.summary().get(Fence.OFFSETS);
    Set<Long> known = new HashSet<>();
    for (Snapshot snapshot : base.snapshots()) {
      known.add(snapshot.snapshotId());
    }
    Map<Long, String> redone = new HashMap<>();
    for (Snapshot added : metadata.snapshots()) {
      Map<String, String> summary = added.summary();
      if (summary == null || known.contains(added.snapshotId())) {
        continue;
      }
      String offsets = summary.get(Fence.OFFSETS);
      String expect = summary.get(Fence.EXPECT);
      if (offsets == null) {
        // a commit that records no offsets of its own (a compaction's rewrite, a manifest
        // rewrite, a DELETE): the current ones, carried forward
        if (recorded != null && summary.get(Fence.RESET) == null && wellFormed(recorded)) {
          redone.put(added.snapshotId(), recorded);
        }
        continue;
      }
      if (expect == null) {
        continue;  // offsets set by hand (maintenance, a reset): as they are
      }
      String value = merged(recorded, offsets, expect);
      if (value != null && !Fence.parse(value).equals(Fence.parse(offsets))) {
        redone.put(added.snapshotId(), value);
      }
    }
    if (redone.isEmpty()) {
      return metadata;
    }
    TableMetadata.Builder builder = TableMetadata.buildFrom(base);
    for (MetadataUpdate change : metadata.changes()) {
      if (change instanceof MetadataUpdate.AddSnapshot) {
        Snapshot snapshot = ((MetadataUpdate.AddSnapshot) change).snapshot();
        String value = redone.remove(snapshot.snapshotId());
        if (value != null) {
          Map<String, String> summary = new LinkedHashMap<>(snapshot.summary());
          summary.put(Fence.OFFSETS, value);
          builder.addSnapshot(new Resummarized(snapshot, summary));
          continue;
        }
      }
      change.applyTo(builder);
    }
    if (!redone.isEmpty()) {  // a snapshot the commit adds that its changes do not
      throw new IllegalStateException("kstage fence: snapshots " + redone.keySet()
          + " are not among the changes of the commit: their kstage.offsets cannot be "
          + "carried forward");
    }
    return builder.build();
  }

  private static boolean wellFormed(String offsets) {
    try {
      Fence.parse(offsets);
      return true;
    } catch (IllegalArgumentException e) {
      return false;
    }
  }

  /**
   * The {@code kstage.offsets} an append records on a base whose current snapshot
   * records {@code current} (null when none, ignored when malformed, as kstage's readers
   * ignore it): {@code current}'s offsets with those of {@code offsets} for the partitions
   * of {@code expect} (the append's own), the higher of each; null when {@code offsets} or
   * {@code expect} is malformed (the value is left as it is; the fence refuses a malformed
   * expectation). JSON in the format of kstage's {@code format_offsets}: groups, topics,
   * partitions sorted, no spaces.
   */
  public static String merged(String current, String offsets, String expect) {
    Map<List<Object>, Long> mine;
    Set<List<Object>> own;
    try {
      mine = Fence.parse(offsets);
      own = Fence.parse(expect).keySet();
    } catch (IllegalArgumentException e) {
      return null;
    }
    Map<List<Object>, Long> merged = new HashMap<>();
    if (current != null) {
      try {
        merged.putAll(Fence.parse(current));
      } catch (IllegalArgumentException e) {
        // ignored, as kstage's readers ignore it
      }
    }
    for (Map.Entry<List<Object>, Long> entry : mine.entrySet()) {
      if (own.contains(entry.getKey())) {
        merged.merge(entry.getKey(), entry.getValue(), Math::max);
      }
    }
    return format(merged);
  }

  /** {@code {group: {topic: {partition: offset}}}}, sorted, compact. */
  static String format(Map<List<Object>, Long> offsets) {
    Map<String, Map<String, Map<Integer, Long>>> sorted = new TreeMap<>();
    for (Map.Entry<List<Object>, Long> entry : offsets.entrySet()) {
      List<Object> stream = entry.getKey();
      sorted.computeIfAbsent((String) stream.get(0), g -> new TreeMap<>())
          .computeIfAbsent((String) stream.get(1), t -> new TreeMap<>())
          .put((Integer) stream.get(2), entry.getValue());
    }
    ObjectNode root = JsonUtil.mapper().createObjectNode();
    sorted.forEach((group, topics) -> {
      ObjectNode groupNode = root.putObject(group);
      topics.forEach((topic, partitions) -> {
        ObjectNode topicNode = groupNode.putObject(topic);
        partitions.forEach((partition, offset) ->
            topicNode.put(String.valueOf(partition), offset));
      });
    });
    try {
      return JsonUtil.mapper().writeValueAsString(root);
    } catch (Exception e) {
      throw new IllegalStateException("kstage fence: cannot write kstage.offsets", e);
    }
  }

  /** A snapshot with another summary, everything else its own. */
  static final class Resummarized implements Snapshot {
    private static final long serialVersionUID = 1L;
    private final Snapshot snapshot;
    private final Map<String, String> summary;

    Resummarized(Snapshot snapshot, Map<String, String> summary) {
      this.snapshot = snapshot;
      this.summary = java.util.Collections.unmodifiableMap(new LinkedHashMap<>(summary));
    }

    @Override
    public long sequenceNumber() {
      return snapshot.sequenceNumber();
    }

    @Override
    public long snapshotId() {
      return snapshot.snapshotId();
    }

    @Override
    public Long parentId() {
      return snapshot.parentId();
    }

    @Override
    public long timestampMillis() {
      return snapshot.timestampMillis();
    }

    @Override
    public List<ManifestFile> allManifests(FileIO io) {
      return snapshot.allManifests(io);
    }

    @Override
    public List<ManifestFile> dataManifests(FileIO io) {
      return snapshot.dataManifests(io);
    }

    @Override
    public List<ManifestFile> deleteManifests(FileIO io) {
      return snapshot.deleteManifests(io);
    }

    @Override
    public String operation() {
      return snapshot.operation();
    }

    @Override
    public Map<String, String> summary() {
      return summary;
    }

    @Override
    public Iterable<DataFile> addedDataFiles(FileIO io) {
      return snapshot.addedDataFiles(io);
    }

    @Override
    public Iterable<DataFile> removedDataFiles(FileIO io) {
      return snapshot.removedDataFiles(io);
    }

    @Override
    public Iterable<DeleteFile> addedDeleteFiles(FileIO io) {
      return snapshot.addedDeleteFiles(io);
    }

    @Override
    public Iterable<DeleteFile> removedDeleteFiles(FileIO io) {
      return snapshot.removedDeleteFiles(io);
    }

    @Override
    public String manifestListLocation() {
      return snapshot.manifestListLocation();
    }

    @Override
    public Integer schemaId() {
      return snapshot.schemaId();
    }

    @Override
    public Long firstRowId() {
      return snapshot.firstRowId();
    }

    @Override
    public Long addedRows() {
      return snapshot.addedRows();
    }

    @Override
    public String keyId() {
      return snapshot.keyId();
    }

    @Override
    public String toString() {
      return snapshot.toString();
    }
  }
}
