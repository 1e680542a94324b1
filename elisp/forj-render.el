;;; forj-render.el --- Tool calls and results as people read them  -*- lexical-binding: t; -*-

;; Copyright (C) 2026 The forj authors

;; This program is free software; you can redistribute it and/or modify
;; it under the terms of the GNU General Public License as published by
;; the Free Software Foundation, either version 3 of the License, or
;; (at your option) any later version.

;; This program is distributed in the hope that it will be useful,
;; but WITHOUT ANY WARRANTY; without even the implied warranty of
;; MERCHANTABILITY or FITNESS FOR A PARTICULAR PURPOSE.  See the
;; GNU General Public License for more details.

;; You should have received a copy of the GNU General Public License
;; along with this program.  If not, see <https://www.gnu.org/licenses/>.

;;; Commentary:

;; The model reads tool results as JSON; people should not have to.
;; This file turns a call and its result into what the chat shows:
;;
;; - a header line: status (✓, ✗, ⊘), the tool, its essential argument
;;   (path and lines, command, pattern), the size of what the model
;;   receives and, when known, how long the call took;
;; - a body drawn for the kind of result: a file as a fenced code block
;;   fontified by the file's own major mode, an edit as its coloured
;;   diff, search hits as `path:line: text' links, listings as a tree of
;;   links, command output with its exit code, an error as its message
;;   and recovery steps;
;; - for a call the model wrote, one readable line (an edit as its
;;   old → new text).
;;
;; The exact JSON stays attached to what is drawn (the `forj-raw' text
;; property): `forj-show-raw-result' shows it.  Long bodies fold to
;; their first lines and a one-line summary; `forj-render-toggle-fold'
;; shows or hides the rest.

;;; Code:

(require 'cl-lib)
(require 'subr-x)
(require 'button)
(require 'diff-mode)
(require 'forj)

;;; Options and faces

(defcustom forj-render-fold-lines 14
  "Bodies with more lines than this are folded to their first lines."
  :type 'natnum
  :group 'forj)

(defcustom forj-render-folded-lines 6
  "How many lines of a folded body stay visible."
  :type 'natnum
  :group 'forj)

(defcustom forj-render-fontify-max-chars (* 256 1024)
  "File contents longer than this are shown without fontification."
  :type 'natnum
  :group 'forj)

(defface forj-render-tool
  '((t :inherit font-lock-function-name-face :weight bold))
  "Face for the tool's name in a header or a call line."
  :group 'forj)

(defface forj-render-ok
  '((t :inherit success))
  "Face for the mark of a call that succeeded."
  :group 'forj)

(defface forj-render-failed
  '((t :inherit error))
  "Face for the mark and message of a call that failed."
  :group 'forj)

(defface forj-render-meta
  '((t :inherit shadow))
  "Face for sizes, durations, summaries and notes."
  :group 'forj)

(defface forj-render-recovery
  '((t :inherit font-lock-doc-face))
  "Face for the recovery steps of an error."
  :group 'forj)

(defface forj-render-match
  '((t :inherit match))
  "Face for the matched text of a search hit."
  :group 'forj)

(defface forj-render-stderr
  '((t :inherit font-lock-warning-face))
  "Face for what a command wrote on stderr."
  :group 'forj)

;;; Small helpers

(defun forj-render--face (text face)
  "Return TEXT with FACE."
  (propertize text 'face face))

(defun forj-render-one-line (text)
  "Return TEXT on one line: a newline in a path or a command could forge a heading."
  (replace-regexp-in-string "[\n\r]+" "⏎" (or text "")))

(defun forj-render--string (value)
  "VALUE as a string if it is one, else nil."
  (and (stringp value) value))

(defun forj-render--list (value)
  "VALUE, a JSON array (vector or list), as a list."
  (cond ((vectorp value) (append value nil))
        ((and (listp value) (not (keywordp (car-safe value)))) value)))

(defun forj-render--count (n word &optional plural)
  "N WORD, or N PLURAL (default WORD with an s) when N is not 1."
  (format "%d %s" n (if (= n 1) word (or plural (concat word "s")))))

(defun forj-render--size (bytes)
  "BYTES as a short human size."
  (if (< bytes 1024)
      (format "%d B" bytes)
    (file-size-human-readable bytes 'iec " ")))

(defun forj-render--duration (ms)
  "MS milliseconds as a short duration."
  (cond ((< ms 1000) (format "%d ms" ms))
        ((< ms 60000) (format "%.1f s" (/ ms 1000.0)))
        (t (format "%dm%02ds" (/ ms 60000) (/ (mod ms 60000) 1000)))))

(defun forj-render--lines (text)
  "How many lines TEXT has (a last line without newline counts)."
  (if (string-empty-p text)
      0
    (+ (cl-count ?\n text) (if (string-suffix-p "\n" text) 0 1))))

(defun forj-render--insert-lines (text &optional prefix face)
  "Insert TEXT, each line after PREFIX, in FACE; end with a newline."
  (let ((lines (split-string (string-remove-suffix "\n" text) "\n")))
    (dolist (line lines)
      (insert (or prefix "") (if face (forj-render--face line face) line) "\n"))))

;;; Links

(define-button-type 'forj-render-file
  'action #'forj-render-visit
  'follow-link t
  'help-echo "RET or mouse: visit this file at this line")

(defun forj-render-visit (button)
  "Open the file of BUTTON in another window, at its line if it has one."
  (let ((file (button-get button 'forj-file))
        (line (button-get button 'forj-line)))
    (if (not (file-exists-p file))
        (message "forj: %s no longer exists" (abbreviate-file-name file))
      (find-file-other-window file)
      (when line
        (goto-char (point-min))
        (forward-line (1- line))))))

(defun forj-render--file (path root)
  "PATH under ROOT as an absolute file name if it names a regular file there."
  (when (and (stringp path) root (not (string-empty-p path)))
    (let ((file (forj-project-file path root)))
      (and file
           (not (file-remote-p file))
           (file-in-directory-p file root)
           (file-regular-p file)
           file))))

(defun forj-render--link (text path line root)
  "Insert TEXT, a link to PATH (under ROOT) at LINE when that file exists."
  (let ((file (forj-render--file path root))
        (from (point)))
    (insert text)
    (when file
      (make-text-button from (point) 'type 'forj-render-file
                        'forj-file file 'forj-line line))))

;;; The essential argument of a call

(defun forj-render--argv (cmd)
  "The command CMD (an argv vector or a shell string) as one line."
  (forj-render-one-line
   (if (stringp cmd) cmd (combine-and-quote-strings (mapcar (lambda (a) (format "%s" a))
                                                            (forj-render--list cmd))))))

(defun forj-render--range (args)
  "The :start_line and :end_line of ARGS as \":A-B\", or \"\"."
  (let ((start (plist-get args :start_line))
        (end (plist-get args :end_line)))
    (cond ((and (integerp start) (integerp end)) (format ":%d-%d" start end))
          ((integerp start) (format ":%d-" start))
          ((integerp end) (format ":1-%d" end))
          (t ""))))

(defun forj-render-essential (name args)
  "What a call to NAME with ARGS is about, in a few words."
  (let ((args (and (listp args) (keywordp (car-safe args)) args)))
    (forj-render-one-line
     (pcase name
       ((or "read_file" "edit_region")
        (concat (or (forj-render--string (plist-get args :path)) "")
                (forj-render--range args)))
       ((or "edit" "write_file") (or (forj-render--string (plist-get args :path)) ""))
       ("multi_edit"
        (string-join (delete-dups (delq nil (mapcar (lambda (e) (forj-render--string (plist-get e :path)))
                                                    (forj-render--list (plist-get args :edits)))))
                     ", "))
       ("search"
        (concat (format "%S" (or (forj-render--string (plist-get args :query)) ""))
                (let ((paths (forj-render--list (plist-get args :include_paths))))
                  (if paths (concat " in " (string-join (cl-remove-if-not #'stringp paths) " ")) ""))))
       ("list_files" (or (forj-render--string (plist-get args :directory)) "."))
       ("glob" (string-join (cl-remove-if-not #'stringp (forj-render--list (plist-get args :patterns))) " "))
       ("run_shell" (forj-render--argv (plist-get args :cmd)))
       ("run_tests"
        (cond ((plist-get args :command) (forj-render--argv (plist-get args :command)))
              ((stringp (plist-get args :selector)) (plist-get args :selector))
              (t "all tests")))
       (_ (or (cl-some (lambda (key) (forj-render--string (plist-get args key)))
                       '(:path :query :directory :name :cmd))
              ""))))))

;;; Call lines

(defun forj-render--excerpt (text width)
  "TEXT on one line, cut to WIDTH characters.
Its leading and trailing blanks and newlines go: an edit's text reads
as the code it changes."
  (truncate-string-to-width (forj-render-one-line (string-trim text)) width nil nil "…"))

(defun forj-render-call-line (call)
  "One readable line for CALL (a plist with :name and :args), no newline.
An edit shows its old and new text as they read, never as escaped
JSON: `edit greet.py: return \"Hello,\" + name → return f\"Hello, {name}!\"'."
  (let* ((name (or (forj-render--string (plist-get call :name)) "?"))
         (args (plist-get call :args))
         (args (and (listp args) (keywordp (car-safe args)) args))
         (essential (forj-render-essential name args))
         (change (pcase name
                   ("edit" (format "%s → %s"
                                   (forj-render--excerpt (or (forj-render--string (plist-get args :old_string)) "") 40)
                                   (forj-render--excerpt (or (forj-render--string (plist-get args :new_string)) "") 40)))
                   ("edit_region" (format "→ %s" (forj-render--excerpt (or (forj-render--string (plist-get args :new_content)) "") 60)))
                   ("write_file" (let ((content (or (forj-render--string (plist-get args :content)) "")))
                                   (concat (forj-render--count (forj-render--lines content) "line")
                                           ", " (forj-render--size (string-bytes content)))))
                   ("multi_edit" (forj-render--count (length (forj-render--list (plist-get args :edits))) "edit"))
                   (_ nil))))
    (concat (forj-render--face "→ " 'forj-render-meta)
            (forj-render--face name 'forj-render-tool)
            (if (string-empty-p essential) "" (concat " " essential))
            (if change (concat (if (string-empty-p essential) " " ": ") change) ""))))

;;; Headers

(defun forj-render--fields (result)
  "The result object of RESULT, or the details of its error, as a plist."
  (let ((fields (or (plist-get result :result)
                    (plist-get (plist-get result :error) :details))))
    (and (listp fields) (keywordp (car-safe fields)) fields)))

(defun forj-render--counts (name fields)
  "Return a few words on the content of a NAME result with FIELDS, or nil."
  (pcase name
    ("read_file" (let ((content (forj-render--string (plist-get fields :content))))
                   (and content (forj-render--count (forj-render--lines content) "line"))))
    ("search" (let* ((n (length (forj-render--list (plist-get fields :matches))))
                     (skipped (plist-get fields :skipped))
                     (left (and (listp skipped)
                                (+ (or (plist-get skipped :too_large) 0) (or (plist-get skipped :binary) 0)))))
                (concat (forj-render--count n "match" "matches")
                        (if (and left (> left 0))
                            (concat " · " (forj-render--count left "file") " not searched")
                          ""))))
    ((or "list_files" "glob") (forj-render--count (length (forj-render--list (plist-get fields :files)))
                                                  "entry" "entries"))
    ((or "run_shell" "run_tests") (and (integerp (plist-get fields :exit_code))
                                       (format "exit %d" (plist-get fields :exit_code))))
    ((or "edit" "edit_region" "multi_edit" "write_file")
     (let ((diff (forj-render--string (plist-get fields :preview))))
       (and diff (let ((added 0) (removed 0))
                   (dolist (line (split-string diff "\n"))
                     (cond ((string-prefix-p "+++" line))
                           ((string-prefix-p "---" line))
                           ((string-prefix-p "+" line) (cl-incf added))
                           ((string-prefix-p "-" line) (cl-incf removed))))
                   (format "+%d −%d" added removed)))))))

(defun forj-render-header (name args state result &optional raw duration)
  "The header line of a call to NAME with ARGS in STATE with RESULT.
STATE is `pending', `manual', `running' or `done'.  RAW is the JSON
text the model receives (for its size); DURATION, in milliseconds,
how long the call took when the result does not say.  No newline."
  (let* ((fields (forj-render--fields result))
         (ok (eq (plist-get result :ok) t))
         (error-type (plist-get (plist-get result :error) :type))
         (mark (pcase state
                 ('pending (forj-render--face "…" 'forj-render-meta))
                 ('manual "⏸")
                 ('running (propertize "⠋" 'forj-tools-spinner t))
                 (_ (cond (ok (forj-render--face "✓" 'forj-render-ok))
                          ((member error-type '("permission-error" "cancelled"))
                           (forj-render--face "⊘" 'forj-render-failed))
                          (t (forj-render--face "✗" 'forj-render-failed))))))
         (essential (forj-render-essential name args))
         (ms (or (and (integerp (plist-get fields :duration_ms)) (plist-get fields :duration_ms))
                 duration))
         (meta (delq nil (list (and (eq state 'done) (not ok) (stringp error-type) error-type)
                               (and (eq state 'done) ok (forj-render--counts name fields))
                               (and raw (forj-render--size (string-bytes raw)))
                               (and (integerp ms) (forj-render--duration ms)))))
         (tags (concat (and (eq (plist-get fields :network) t) " [network on]")
                       (and (equal (plist-get fields :sandbox) "none") " [unsandboxed]"))))
    (concat mark " " (forj-render--face (forj-render-one-line name) 'forj-render-tool)
            (if (string-empty-p essential) "" (concat " " essential))
            (if meta (forj-render--face (concat "  · " (string-join meta " · ")) 'forj-render-meta) "")
            (if (string-empty-p tags) "" (forj-render--face tags 'warning)))))

;;; Bodies

(defun forj-render--mode-for (path)
  "The major mode `auto-mode-alist' gives PATH, or nil."
  (let ((mode (and (stringp path)
                   (assoc-default (file-name-nondirectory path) auto-mode-alist #'string-match))))
    (when (consp mode) (setq mode (car mode)))
    (and (symbolp mode) (fboundp mode) mode)))

(defun forj-render--language (mode)
  "The info string of a code block in MODE."
  (if mode (string-remove-suffix "-mode" (symbol-name mode)) ""))

(defvar forj-render--fontified (make-hash-table :test #'eq :weakness 'key)
  "Fontified copies of file contents, by the content string itself.
A batch is drawn again at every step of every call; a result's
content string stays the same object, so it is fontified once.")

(defun forj-render-fontify (text mode)
  "TEXT with the faces MODE's font-lock gives it.
Text over `forj-render-fontify-max-chars', or a MODE that fails, stays plain."
  (if (or (null mode) (> (length text) forj-render-fontify-max-chars))
      text
    (let ((known (gethash text forj-render--fontified)))
      (if (eq (car known) mode)
          (cdr known)
        (let ((done (forj-render--fontify-now text mode)))
          (puthash text (cons mode done) forj-render--fontified)
          done)))))

(defun forj-render--fontify-now (text mode)
  "TEXT fontified by MODE in a temporary buffer; plain TEXT if MODE fails."
  (condition-case nil
      (with-temp-buffer
        (insert text)
        (let ((inhibit-message t)
              (enable-local-variables nil))
          (delay-mode-hooks (funcall mode))
          (font-lock-ensure))
        (let ((out (copy-sequence text))
              (pos (point-min)))
          (set-text-properties 0 (length out) nil out)
          (while (< pos (point-max))
            (let ((next (next-single-property-change pos 'face nil (point-max)))
                  (face (get-text-property pos 'face)))
              (when face
                (put-text-property (1- pos) (1- next) 'face face out))
              (setq pos next)))
          out))
    (error text)))

(defun forj-render--body-read (fields root)
  "Draw a read_file result FIELDS: a fenced, fontified code block; ROOT for links."
  (let* ((path (forj-render--string (plist-get fields :path)))
         (content (forj-render--string (plist-get fields :content)))
         (mode (forj-render--mode-for path)))
    (if (null content)
        (forj-render--body-generic fields root)
      (insert (forj-render--face (concat "```" (forj-render--language mode)) 'forj-render-meta) "\n")
      (let ((text (forj-render-fontify content mode)))
        (insert text)
        (unless (string-suffix-p "\n" text) (insert "\n")))
      (insert (forj-render--face "```" 'forj-render-meta) "\n")
      (when (eq (plist-get fields :truncated) t)
        (insert (forj-render--face
                 (format "(truncated: the file has %s lines, %s)"
                         (or (plist-get fields :total_lines) "?")
                         (if (integerp (plist-get fields :size))
                             (forj-render--size (plist-get fields :size)) "?"))
                 'forj-render-meta)
                "\n")))))

(defun forj-render--diff (diff)
  "Insert DIFF, a unified diff, in `diff-mode' faces."
  (dolist (line (split-string (string-remove-suffix "\n" diff) "\n"))
    (insert (forj-render--face
             line
             (cond ((or (string-prefix-p "+++" line) (string-prefix-p "---" line)) 'diff-file-header)
                   ((string-prefix-p "@@" line) 'diff-hunk-header)
                   ((string-prefix-p "+" line) 'diff-added)
                   ((string-prefix-p "-" line) 'diff-removed)
                   (t 'diff-context)))
            "\n")))

(defun forj-render--body-edit (fields root)
  "Draw an edit's result FIELDS: the diff it applied; ROOT for links."
  (let ((diff (forj-render--string (plist-get fields :preview))))
    (if (and diff (not (string-empty-p diff)))
        (forj-render--diff diff)
      (let ((path (forj-render--string (plist-get fields :path))))
        (when path
          (forj-render--link path path nil root)
          (insert (forj-render--face (if (eq (plist-get fields :created) t) " created" " written")
                                     'forj-render-meta)
                  "\n"))))
    (forj-render--notes fields)))

(defun forj-render--body-search (fields root)
  "Draw search result FIELDS: one `path:line: text' link per hit; ROOT for links."
  (let ((matches (forj-render--list (plist-get fields :matches))))
    (if (null matches)
        (insert (forj-render--face "no match" 'forj-render-meta) "\n")
      (dolist (match matches)
        (let ((path (or (forj-render--string (plist-get match :path)) "?"))
              (line (plist-get match :line)))
          (forj-render--link (format "%s:%s" path (if (integerp line) line "?"))
                             path (and (integerp line) line) root)
          (insert ": "
                  (forj-render-one-line (or (forj-render--string (plist-get match :before)) ""))
                  (forj-render--face (forj-render-one-line
                                      (or (forj-render--string (plist-get match :match_text)) ""))
                                     'forj-render-match)
                  (forj-render-one-line (or (forj-render--string (plist-get match :after)) ""))
                  "\n"))))
    (when (eq (plist-get fields :truncated) t)
      (insert (forj-render--face "(more matches were left out)" 'forj-render-meta) "\n"))
    (forj-render--skipped (plist-get fields :skipped))))

(defun forj-render--skipped (skipped)
  "Say which files a search did not look into, from its SKIPPED field."
  (when (and (listp skipped) (keywordp (car-safe skipped)))
    (let ((examples (plist-get skipped :examples))
          (cap (if (integerp (plist-get skipped :max_bytes))
                   (forj-render--size (plist-get skipped :max_bytes))
                 "search")))
      (pcase-dolist (`(,n ,what ,names)
                     `((,(plist-get skipped :too_large)
                        ,(lambda (n) (format "%s over the %s size cap" (forj-render--count n "file") cap))
                        ,(plist-get examples :too_large))
                       (,(plist-get skipped :binary)
                        ,(lambda (n) (forj-render--count n "binary file"))
                        ,(plist-get examples :binary))))
        (when (and (integerp n) (> n 0))
          (let ((names (cl-remove-if-not #'stringp (forj-render--list names))))
            (insert (forj-render--face
                     (format "not searched: %s (%s%s)" (funcall what n)
                             (string-join names ", ") (if (> n (length names)) ", …" ""))
                     'forj-render-meta)
                    "\n")))))))

(defun forj-render--body-glob (fields root)
  "Draw glob result FIELDS: one link per matching path; ROOT for links."
  (let ((entries (forj-render--list (plist-get fields :files))))
    (if (null entries)
        (insert (forj-render--face "no match" 'forj-render-meta) "\n")
      (dolist (entry entries)
        (let ((path (or (forj-render--string (plist-get entry :path)) "?")))
          (forj-render--link (forj-render-one-line path) path nil root)
          (insert "\n"))))
    (when (eq (plist-get fields :truncated) t)
      (insert (forj-render--face "(more paths matched; narrow the patterns)" 'forj-render-meta) "\n"))))

(defun forj-render--body-listing (fields root)
  "Draw list_files result FIELDS as a tree of links; ROOT for links."
  (let ((entries (forj-render--list (plist-get fields :files)))
        (base (let ((dir (forj-render--string (plist-get fields :directory))))
                (if (or (null dir) (member dir '("." "./" ""))) "" (file-name-as-directory dir)))))
    (if (null entries)
        (insert (forj-render--face "nothing" 'forj-render-meta) "\n")
      (dolist (entry entries)
        (let* ((path (or (forj-render--string (plist-get entry :path)) "?"))
               (shown (if (string-prefix-p base path) (substring path (length base)) path))
               (depth (cl-count ?/ (string-remove-suffix "/" shown)))
               (dir (equal (plist-get entry :type) "dir"))
               (name (concat (file-name-nondirectory (directory-file-name shown)) (if dir "/" ""))))
          (insert (make-string (* 2 depth) ?\s))
          (if dir
              (insert (forj-render--face (forj-render-one-line name) 'font-lock-keyword-face))
            (forj-render--link (forj-render-one-line name) path nil root))
          (when (and (not dir) (integerp (plist-get entry :size)))
            (insert (forj-render--face (concat "  " (forj-render--size (plist-get entry :size)))
                                       'forj-render-meta)))
          (insert "\n"))))
    (when (eq (plist-get fields :truncated) t)
      (insert (forj-render--face "(the listing was cut; narrow it with a directory or patterns)"
                                 'forj-render-meta)
              "\n"))))

(defcustom forj-render-failed-tail-lines 20
  "How many last lines of a failed command's output the chat shows.
The earlier lines are folded away; TAB shows them."
  :type 'natnum
  :group 'forj)

(defvar forj-render--tail-fold nil
  "Set by a body that folds its head instead: (FROM TO LINES) to hide.")

(defun forj-render--body-command (fields _root)
  "Draw a command's result FIELDS: its output, exit code and duration.
A failed command keeps its last `forj-render-failed-tail-lines' lines
of output (stdout, then stderr) in view: that is where a failing test
run says what failed."
  (let ((report (forj-render--string (plist-get fields :report)))
        (stdout (forj-render--string (plist-get fields :stdout)))
        (stderr (forj-render--string (plist-get fields :stderr)))
        ;; A failed test run's error gives its output's tail as one text.
        (combined (forj-render--string (plist-get fields :output)))
        (code (plist-get fields :exit_code))
        (ms (plist-get fields :duration_ms))
        (output (point)))
    (when (and report (not (string-empty-p report))) (forj-render--insert-lines report))
    (when (and combined (not (string-empty-p combined))) (forj-render--insert-lines combined))
    (when (and stdout (not (string-empty-p stdout))) (forj-render--insert-lines stdout))
    (when (and stderr (not (string-empty-p stderr)))
      (forj-render--insert-lines stderr nil 'forj-render-stderr))
    (let ((lines (count-lines output (point))))
      (when (and (not (eql code 0)) (> lines forj-render-failed-tail-lines))
        (setq forj-render--tail-fold
              (list output
                    (save-excursion (forward-line (- forj-render-failed-tail-lines)) (point))
                    (- lines forj-render-failed-tail-lines)))))
    (insert (forj-render--face
             (concat "[" (if (integerp code) (format "exit code %d" code) "no exit code")
                     (if (integerp ms) (concat ", " (forj-render--duration ms)) "")
                     "]")
             (if (eql code 0) 'forj-render-meta 'forj-render-failed))
            "\n")
    (forj-render--notes fields)))

(defun forj-render--notes (fields)
  "Insert the note of result FIELDS, if it has one."
  (let ((note (forj-render--string (plist-get fields :note))))
    (when note (forj-render--insert-lines note "note: " 'forj-render-meta))))

(defun forj-render--value-lines (value indent)
  "Insert VALUE as indented key: value lines, INDENT spaces deep."
  (let ((pad (make-string indent ?\s)))
    (cond
     ((and (listp value) (keywordp (car-safe value)))
      (cl-loop for (key val) on value by #'cddr
               do (let ((label (concat pad (substring (symbol-name key) 1) ":")))
                    (if (or (stringp val) (numberp val) (memq val '(t :false :null)))
                        (forj-render--scalar label val indent)
                      (insert label "\n")
                      (forj-render--value-lines val (+ indent 2))))))
     ((or (vectorp value) (consp value))
      (dolist (item (forj-render--list value))
        (if (or (stringp item) (numberp item) (memq item '(t :false :null)))
            (forj-render--scalar (concat pad "-") item indent)
          (insert pad "-\n")
          (forj-render--value-lines item (+ indent 2)))))
     (t (forj-render--scalar pad value indent)))))

(defun forj-render--scalar (label value indent)
  "Insert LABEL and the scalar VALUE (a multi-line one below it, INDENT deep)."
  (let ((text (pcase value ('t "true") (:false "false") (:null "null")
                     ((pred stringp) value) (_ (format "%s" value)))))
    (if (string-match-p "\n" text)
        (progn (insert label "\n")
               (forj-render--insert-lines text (make-string (+ indent 2) ?\s)))
      (insert label " " text "\n"))))

(defun forj-render--body-generic (fields _root)
  "Draw result FIELDS of a kind with no drawing of its own, field by field."
  (if fields
      (forj-render--value-lines fields 0)
    (insert (forj-render--face "(no result)" 'forj-render-meta) "\n")))

(defun forj-render--body-error (err)
  "Draw the error ERR: its message, then each recovery step."
  (let ((message (or (forj-render--string (plist-get err :message)) "(no message)"))
        (recovery (forj-render--list (plist-get err :recovery))))
    ;; Indented: a message may hold anything, a line like a heading too.
    (forj-render--insert-lines message "  " 'forj-render-failed)
    (dolist (step recovery)
      (when (stringp step)
        (forj-render--insert-lines step "  ↳ " 'forj-render-recovery)))))

(declare-function forj-tasks-result-summary "forj-tasks" (name args result))

(defun forj-render-body (name result root &optional args)
  "Insert the body of RESULT, the result of a call to NAME, at point.
Paths under ROOT that name files become links.  ARGS, the call's
arguments, let a plan change (`todo_write', `task') show as one line."
  (if (not (eq (plist-get result :ok) t))
      (let ((details (forj-render--fields result)))
        (forj-render--body-error (plist-get result :error))
        ;; A command that failed: its output is what says why.
        (when (and (member name '("run_shell" "run_tests"))
                   (or (forj-render--string (plist-get details :stdout))
                       (forj-render--string (plist-get details :stderr))
                       (forj-render--string (plist-get details :output))))
          (forj-render--body-command details root)))
    (let ((fields (forj-render--fields result))
          (plan (and (member name '("todo_write" "task"))
                     (require 'forj-tasks nil t)
                     (forj-tasks-result-summary name args result))))
      (if plan
          (insert (forj-render--face plan 'forj-render-meta) "\n")
        (funcall (pcase name
                   ("read_file" #'forj-render--body-read)
                   ((or "edit" "edit_region" "multi_edit" "write_file") #'forj-render--body-edit)
                   ("search" #'forj-render--body-search)
                   ("list_files" #'forj-render--body-listing)
                   ("glob" #'forj-render--body-glob)
                   ((or "run_shell" "run_tests") #'forj-render--body-command)
                   (_ #'forj-render--body-generic))
		 (if fields fields (let ((value (plist-get result :result)))
                                     (and value (list :value value))))
		 root)))))

(defun forj-render-header-links (from to path line root)
  "Make PATH between FROM and TO (a header) a link to it at LINE under ROOT."
  (when (and (stringp path) (not (string-empty-p path)))
    (save-excursion
      (goto-char from)
      (when (search-forward path to t)
        (let ((beg (match-beginning 0))
              (end (match-end 0))
              (file (forj-render--file path root)))
          (when file
            (make-text-button beg end 'type 'forj-render-file
                              'forj-file file 'forj-line line)))))))

;;; Folding

(defcustom forj-render-fold-chars 4000
  "Bodies longer than this many characters are folded, however few their lines.
A 98 KB single line or a base64 blob would otherwise flood the chat."
  :type 'natnum
  :group 'forj)

(defcustom forj-render-folded-chars 800
  "At most how many characters of a folded body stay visible."
  :type 'natnum
  :group 'forj)

(defun forj-render-body-folded (name result root args)
  "Insert the body of RESULT (NAME's, with ARGS, under ROOT) and fold it if long.
Return the fold overlay, or nil."
  (let ((from (point))
        (forj-render--tail-fold nil))
    (forj-render-body name result root args)
    (if forj-render--tail-fold
        (pcase-let ((`(,beg ,end ,lines) forj-render--tail-fold))
          (forj-render--fold-region
           beg end (format "▸ %d earlier line%s of output (TAB shows them)\n"
                           lines (if (= lines 1) "" "s"))))
      (forj-render-fold from (point) (format "this %s result" name)))))

(defun forj-render--fold-region (beg end label)
  "Hide BEG..END behind LABEL; return the overlay."
  (let ((fold (make-overlay beg end nil t nil))
        (label (forj-render--face label 'forj-render-meta)))
    (overlay-put fold 'forj-render-fold t)
    (overlay-put fold 'invisible t)
    (overlay-put fold 'evaporate t)
    (overlay-put fold 'forj-render-label label)
    (overlay-put fold 'before-string label)
    fold))

(defun forj-render-fold (from to summary)
  "Fold the body between FROM and TO if it is long; SUMMARY names what it is.
Long is more than `forj-render-fold-lines' lines or more than
`forj-render-fold-chars' characters.  Its first
`forj-render-folded-lines' lines, at most `forj-render-folded-chars'
characters, stay visible, then one line says how much is hidden.  The
text stays; only the display hides it.  Return the fold overlay, or
nil if the body is short."
  (let ((lines (count-lines from to)))
    (when (or (> lines forj-render-fold-lines) (> (- to from) forj-render-fold-chars))
      (let* ((by-lines (save-excursion (goto-char from)
                                       (forward-line forj-render-folded-lines)
                                       (point)))
             (hide-from (min by-lines (+ from forj-render-folded-chars)))
             (mid-line (save-excursion (goto-char hide-from) (not (bolp))))
             (hidden-lines (count-lines hide-from to))
             (fold (make-overlay hide-from to nil t nil))
             (label (forj-render--face
                     (concat (if mid-line "…\n" "")
                             (if (and (not mid-line) (> lines forj-render-fold-lines))
                                 (format "▸ %d more line%s of %s (TAB shows them)\n"
                                         hidden-lines (if (= hidden-lines 1) "" "s") summary)
                               (format "▸ %s more of %s (TAB shows it)\n"
                                       (forj-render--size (string-bytes (buffer-substring-no-properties hide-from to)))
                                       summary)))
                     'forj-render-meta)))
        (overlay-put fold 'forj-render-fold t)
        (overlay-put fold 'invisible t)
        (overlay-put fold 'evaporate t)
        (overlay-put fold 'forj-render-label label)
        (overlay-put fold 'before-string label)
        fold))))

(defun forj-render-toggle-fold (&optional pos)
  "Show or hide the rest of the folded body at POS (default: point).
Return non-nil if there was one."
  (let ((fold (get-text-property (or pos (point)) 'forj-render-fold-overlay)))
    (when (and (overlayp fold) (overlay-buffer fold))
      (let ((hidden (overlay-get fold 'invisible)))
        (overlay-put fold 'invisible (not hidden))
        (overlay-put fold 'before-string (and (not hidden) (overlay-get fold 'forj-render-label)))
        t))))

;;; The exact JSON

;;;###autoload
(defun forj-show-raw-result (&optional pos)
  "Show the exact JSON of the tool result or call at POS (default: point).
This is what the model received (or wrote), byte for byte."
  (interactive)
  (let ((raw (get-text-property (or pos (point)) 'forj-raw))
        (what (get-text-property (or pos (point)) 'forj-raw-kind)))
    (if (not (stringp raw))
        (user-error "No tool result or call here")
      (let ((buffer (get-buffer-create "*forj raw*")))
        (with-current-buffer buffer
          (let ((inhibit-read-only t))
            (erase-buffer)
            (insert raw)
            (goto-char (point-min))
            (when (fboundp 'js-json-mode) (funcall 'js-json-mode))
            (setq-local header-line-format
                        (format " The exact JSON of this tool %s (%s)"
                                (or what "result") (forj-render--size (string-bytes raw))))
            (set-buffer-modified-p nil)
            (setq buffer-read-only t)))
        (display-buffer buffer)
        buffer))))

(provide 'forj-render)
;;; forj-render.el ends here
