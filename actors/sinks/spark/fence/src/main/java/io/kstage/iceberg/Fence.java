package io.kstage.iceberg;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.iceberg.Snapshot;
import org.apache.iceberg.TableMetadata;
import org.apache.iceberg.TableOperations;
import org.apache.iceberg.encryption.EncryptionManager;
import org.apache.iceberg.exceptions.ValidationException;
import org.apache.iceberg.io.FileIO;
import org.apache.iceberg.io.LocationProvider;
import org.apache.iceberg.shaded.com.fasterxml.jackson.databind.JsonNode;
import org.apache.iceberg.util.JsonUtil;
import org.apache.iceberg.util.SnapshotUtil;

/**
 * A table's operations whose {@link #commit} first applies kstage's fence, then hands the
 * commit to the catalog's own operations.
 *
 * <p>The fence: every snapshot the commit adds whose summary carries {@code kstage.expect}
 * (JSON {@code {group: {topic: {partition: offset}}}}, the format of {@code kstage.offsets})
 * commits only if, for each of those streams, the table's recorded offset in {@code base}
 * equals the expected one. The recorded offset is the highest value of that stream over the
 * {@code kstage.offsets} of the snapshots in base's current (main) ancestry, 0 when none has
 * it. {@code base} is the metadata the catalog's compare-and-swap is applied on, and Iceberg
 * calls {@code commit} again with refreshed metadata on every optimistic retry, so the check
 * holds for the metadata the snapshot actually lands on. A refusal is a {@link
 * ValidationException} (not retried, not "commit state unknown"; Iceberg and Spark delete the
 * files written for the commit) whose message starts with {@code kstage fence:}.
 *
 * <p>A commit that passes has the {@code kstage.offsets} of its fenced snapshots made again
 * on {@code base} ({@link CarriedOffsets}): what the writer carried forward from the table
 * it read would drop the offsets another writer recorded before an optimistic retry.
 */
public final class Fence implements TableOperations {
  public static final String EXPECT = "kstage.expect";
  public static final String OFFSETS = "kstage.offsets";
  public static final String RESET = "kstage.offsets-reset";
  public static final String PREFIX = "kstage fence: ";

  private final TableOperations ops;
  private final String table;

  public Fence(TableOperations ops, String table) {
    this.ops = ops;
    this.table = table;
  }

  /** The catalog's own operations this fence wraps. */
  public TableOperations delegate() {
    return ops;
  }

  @Override
  public void commit(TableMetadata base, TableMetadata metadata) {
    String refusal = refusal(table, base, metadata);
    if (refusal != null) {
      throw new ValidationException("%s", refusal);
    }
    ops.commit(base, CarriedOffsets.onto(base, metadata));
  }

  /**
   * Why the commit of {@code metadata} on top of {@code base} breaks the fence, or null when
   * it does not (no added snapshot carries {@code kstage.expect}, or every expectation holds).
   */
  public static String refusal(String table, TableMetadata base, TableMetadata metadata) {
    Set<Long> known = new HashSet<>();
    if (base != null) {
      for (Snapshot snapshot : base.snapshots()) {
        known.add(snapshot.snapshotId());
      }
    }
    List<List<String>> history = null;
    for (Snapshot added : metadata.snapshots()) {
      Map<String, String> summary = added.summary();
      String expect = summary == null ? null : summary.get(EXPECT);
      if (expect == null || known.contains(added.snapshotId())) {
        continue;
      }
      if (history == null) {
        history = recorded(base);
      }
      String why = refusal(table, expect, history.get(0), history.get(1));
      if (why != null) {
        return why;
      }
    }
    return null;
  }

  /**
   * The {@code kstage.offsets} and {@code kstage.offsets-reset} values (null where a snapshot
   * has none) of base's current ancestry, newest first: {@code [offsets, resets]}.
   */
  private static List<List<String>> recorded(TableMetadata base) {
    List<String> offsets = new ArrayList<>();
    List<String> resets = new ArrayList<>();
    Snapshot current = base == null ? null : base.currentSnapshot();
    if (current != null) {
      for (Snapshot snapshot : SnapshotUtil.ancestorsOf(current.snapshotId(), base::snapshot)) {
        Map<String, String> summary = snapshot.summary();
        offsets.add(summary == null ? null : summary.get(OFFSETS));
        resets.add(summary == null ? null : summary.get(RESET));
      }
    }
    return List.of(offsets, resets);
  }

  /** {@link #refusal(String, String, List, List)} of a history without resets. */
  public static String refusal(String table, String expect, List<String> history) {
    return refusal(table, expect, history, new ArrayList<>(java.util.Collections.nCopies(
        history.size(), (String) null)));
  }

  /**
   * The rule on plain values: {@code expect} (a {@code kstage.expect}) against the {@code
   * kstage.offsets} values of the base's ancestry ({@code history}, newest first; null or
   * malformed ones are ignored, as kstage's reader ignores them) and the {@code
   * kstage.offsets-reset} values of the same snapshots ({@code resets}, aligned with it,
   * null where a snapshot reset nothing). The recorded offset of a stream is the highest
   * {@code kstage.offsets} value from the stream's newest reset on (that reset's value
   * included), over the whole history when it was never reset: the rule of kstage's
   * readers ({@code actors.sinks.spark.offset_history}). Null when every expectation holds,
   * else the refusal naming the table and each stream whose recorded offset differs.
   */
  public static String refusal(String table, String expect, List<String> history,
      List<String> resets) {
    Map<List<Object>, Long> expected;
    try {
      expected = parse(expect);
    } catch (IllegalArgumentException e) {
      return PREFIX + "table " + table + ": " + EXPECT + " is not kstage's offsets JSON ("
          + e.getMessage() + "): " + expect;
    }
    Map<List<Object>, Long> found = new HashMap<>();
    for (int i = history.size() - 1; i >= 0; i--) {  // oldest first
      String reset = i < resets.size() ? resets.get(i) : null;
      if (reset != null) {
        try {
          found.putAll(parse(reset));
        } catch (IllegalArgumentException e) {
          // ignored, as kstage's readers ignore it
        }
      }
      String value = history.get(i);
      if (value == null) {
        continue;
      }
      Map<List<Object>, Long> offsets;
      try {
        offsets = parse(value);
      } catch (IllegalArgumentException e) {
        continue;
      }
      offsets.forEach((stream, offset) -> found.merge(stream, offset, Math::max));
    }
    List<String> wrong = new ArrayList<>();
    for (Map.Entry<List<Object>, Long> entry : expected.entrySet()) {
      List<Object> stream = entry.getKey();
      long has = found.getOrDefault(stream, 0L);
      if (has != entry.getValue()) {
        wrong.add("group " + stream.get(0) + " topic " + stream.get(1) + " partition "
            + stream.get(2) + ": expected offset " + entry.getValue() + ", found " + has);
      }
    }
    if (wrong.isEmpty()) {
      return null;
    }
    return PREFIX + "table " + table + ": " + String.join("; ", wrong)
        + " (the table's offsets moved since this writer read them: another writer "
        + "committed these partitions; this append is refused)";
  }

  /** {@code {group: {topic: {partition: offset}}}} as (group, topic, partition) -> offset. */
  static Map<List<Object>, Long> parse(String value) {
    JsonNode root;
    try {
      root = JsonUtil.mapper().readTree(value);
    } catch (Exception e) {
      throw new IllegalArgumentException("not JSON: " + e.getMessage(), e);
    }
    if (root == null || !root.isObject()) {
      throw new IllegalArgumentException("not a JSON object");
    }
    Map<List<Object>, Long> offsets = new LinkedHashMap<>();
    for (Iterator<Map.Entry<String, JsonNode>> groups = root.fields(); groups.hasNext(); ) {
      Map.Entry<String, JsonNode> group = groups.next();
      require(group.getValue().isObject(), "group " + group.getKey() + " is not an object");
      for (Iterator<Map.Entry<String, JsonNode>> topics = group.getValue().fields();
          topics.hasNext(); ) {
        Map.Entry<String, JsonNode> topic = topics.next();
        require(topic.getValue().isObject(), "topic " + topic.getKey() + " is not an object");
        for (Iterator<Map.Entry<String, JsonNode>> parts = topic.getValue().fields();
            parts.hasNext(); ) {
          Map.Entry<String, JsonNode> part = parts.next();
          int partition;
          try {
            partition = Integer.parseInt(part.getKey().strip());
          } catch (NumberFormatException e) {
            throw new IllegalArgumentException("partition " + part.getKey() + " is not a number");
          }
          JsonNode offset = part.getValue();
          require(offset.isIntegralNumber(), "offset of partition " + part.getKey()
              + " is not an integer");
          offsets.put(List.of(group.getKey(), topic.getKey(), partition), offset.longValue());
        }
      }
    }
    return offsets;
  }

  private static void require(boolean condition, String why) {
    if (!condition) {
      throw new IllegalArgumentException(why);
    }
  }

  @Override
  public TableMetadata current() {
    return ops.current();
  }

  @Override
  public TableMetadata refresh() {
    return ops.refresh();
  }

  @Override
  public FileIO io() {
    return ops.io();
  }

  @Override
  public EncryptionManager encryption() {
    return ops.encryption();
  }

  @Override
  public String metadataFileLocation(String fileName) {
    return ops.metadataFileLocation(fileName);
  }

  @Override
  public LocationProvider locationProvider() {
    return ops.locationProvider();
  }

  @Override
  public TableOperations temp(TableMetadata uncommittedMetadata) {
    return ops.temp(uncommittedMetadata);
  }

  @Override
  public long newSnapshotId() {
    return ops.newSnapshotId();
  }

  @Override
  public boolean requireStrictCleanup() {
    return ops.requireStrictCleanup();
  }
}
