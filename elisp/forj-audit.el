;;; forj-audit.el --- The journal as a table: every tool call, who allowed it, how it ended  -*- lexical-binding: t; -*-

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

;; `forj-audit' lists the tool calls the worker journaled for a project,
;; newest first, from every chat and every transport (Emacs, MCP, the
;; SDK): when, which tool, its arguments in short, who decided that it
;; runs and how (a review, a standing grant, a rule, the permission
;; mode; "validation" when it was refused before consent, such as a
;; path outside the project), how long it ran, how it ended, and the
;; files it changed.
;;
;; The rows come from the worker's `audit' method a page at a time,
;; without waiting: Emacs stays usable while they load.  In the table,
;; `RET' shows the call as received and its result as sent, `t', `o'
;; and `s' filter by tool, outcome and text, `c' clears the filters,
;; `+' loads the next page, `g' loads again, and `w'
;; (`forj-audit-export') writes every row the filters keep to a file
;; as JSON lines.

;;; Code:

(require 'cl-lib)
(require 'subr-x)
(require 'json)
(require 'tabulated-list)
(require 'forj)
(require 'forj-epc)
(require 'forj-worker)
(require 'forj-session)

(defcustom forj-audit-page-size 200
  "How many rows the audit table asks the worker for at a time."
  :type '(integer :tag "Rows")
  :group 'forj)

(defcustom forj-audit-export-limit 100000
  "The most rows `forj-audit-export' writes."
  :type '(integer :tag "Rows")
  :group 'forj)

(defconst forj-audit--outcomes '("ok" "error" "refused" "none")
  "The outcomes a row can have: none means the call never got a result.")

(defvar-local forj-audit--root nil
  "The project root this audit buffer lists.")

(defvar-local forj-audit--filter nil
  "The filters in force: a plist of :tool, :outcome and :text.")

(defvar-local forj-audit--rows nil
  "The rows loaded so far, newest first (plists from the worker).")

(defvar-local forj-audit--next-offset nil
  "The offset of the next page, or nil when every row is loaded.")

(defvar-local forj-audit--state nil
  "Nil when idle, `loading' while a page is asked for, or an error message.")

(defvar-local forj-audit--generation 0
  "Counts reloads, so a page asked for before one is dropped.")

(defmacro forj-audit--in (buffer generation &rest body)
  "Run BODY in BUFFER if it lives and has not reloaded since GENERATION."
  (declare (indent 2) (debug t))
  `(when (buffer-live-p ,buffer)
     (with-current-buffer ,buffer
       (when (= forj-audit--generation ,generation) ,@body))))

(defvar forj-audit-mode-map
  (let ((map (make-sparse-keymap)))
    (set-keymap-parent map tabulated-list-mode-map)
    (define-key map (kbd "RET") #'forj-audit-show)
    (define-key map "g" #'forj-audit-refresh)
    (define-key map "+" #'forj-audit-more)
    (define-key map "t" #'forj-audit-filter-tool)
    (define-key map "o" #'forj-audit-filter-outcome)
    (define-key map "s" #'forj-audit-filter-text)
    (define-key map "c" #'forj-audit-clear-filters)
    (define-key map "w" #'forj-audit-export)
    map)
  "Keymap of `forj-audit-mode'.")

(define-derived-mode forj-audit-mode tabulated-list-mode "forj-audit"
  "The tool calls of a project's journal, newest first.
\\{forj-audit-mode-map}"
  (setq tabulated-list-format
        [("Time" 19 nil)
         ("Tool" 12 nil)
         ("Arguments" 40 nil)
         ("Decided" 10 nil)
         ("Outcome" 8 nil)
         ("ms" 8 nil :right-align t)
         ("Files" 0 nil)])
  (setq tabulated-list-padding 1)
  (setq mode-line-process '(:eval (forj-audit--status)))
  (tabulated-list-init-header))

;;;###autoload
(defun forj-audit (&optional root)
  "List the journal of ROOT's project: each tool call, newest first.
ROOT defaults to the current chat's project, else the current
directory's.  In the table, \\<forj-audit-mode-map>\\[forj-audit-show] shows a call and its result;
\\[forj-audit-filter-tool], \\[forj-audit-filter-outcome] and \\[forj-audit-filter-text] filter by tool, outcome and text;
\\[forj-audit-more] loads more rows; \\[forj-audit-export] exports them as JSON lines."
  (interactive)
  (let* ((root (file-name-as-directory
                (expand-file-name
                 (or root
                     (forj-session-current-root)
                     (forj-worker-project-root)))))
         (buffer (get-buffer-create
                  (format "*forj-audit: %s*" (file-name-nondirectory (directory-file-name root))))))
    (with-current-buffer buffer
      (unless (derived-mode-p 'forj-audit-mode) (forj-audit-mode))
      (setq forj-audit--root root))
    (pop-to-buffer buffer)
    (with-current-buffer buffer (forj-audit-refresh))
    buffer))

(defun forj-audit--status ()
  "The mode line's part: the rows loaded, the filters, and what is going on."
  (let ((filters (forj-audit--describe-filter)))
    (format " [%d rows%s%s%s]"
            (length forj-audit--rows)
            (if forj-audit--next-offset ", + for more" "")
            (if filters (concat "; " filters) "")
            (pcase forj-audit--state
              ('loading "; loading…")
              ((pred stringp) (concat "; failed: " forj-audit--state))
              (_ "")))))

(defun forj-audit--describe-filter ()
  "The filters in force, as text, or nil."
  (let ((parts (cl-loop for (key name) on '(:tool "tool" :outcome "outcome" :text "text") by #'cddr
                        for value = (plist-get forj-audit--filter key)
                        when value collect (format "%s=%s" name value))))
    (and parts (string-join parts " "))))

(defun forj-audit--request (offset limit)
  "The `audit' request body for OFFSET and LIMIT under the filters in force."
  (append (list :offset offset :limit limit)
          (cl-loop for key in '(:tool :outcome :text)
                   for value = (plist-get forj-audit--filter key)
                   when value append (list key value))))

(defun forj-audit--call (root method body success failure)
  "Call METHOD with BODY on ROOT's worker; SUCCESS or FAILURE with the reply.
FAILURE gets a message.  Nothing waits."
  (forj-worker-ensure
   root
   (lambda (worker)
     (forj-epc-call (forj-worker-connection worker) method body
                    :success success
                    :error (lambda (err) (funcall failure (forj-audit--message err)))))
   (lambda (err) (funcall failure (forj-audit--message err)))))

(defun forj-audit--message (err)
  "The message of the error plist ERR."
  (or (and (listp err) (plist-get err :message)) (format "%s" err)))

(defun forj-audit-refresh ()
  "Load the rows again from the first page."
  (interactive)
  (unless forj-audit--root (user-error "Not in a forj audit buffer"))
  (setq forj-audit--rows nil
        forj-audit--next-offset nil
        forj-audit--generation (1+ forj-audit--generation))
  (forj-audit--load 0))

(defun forj-audit-more ()
  "Load the next page of rows."
  (interactive)
  (cond ((eq forj-audit--state 'loading) (message "forj: still loading"))
        ((null forj-audit--next-offset) (message "forj: every row is loaded"))
        (t (forj-audit--load forj-audit--next-offset))))

(defun forj-audit--load (offset)
  "Ask for the page at OFFSET; add its rows when it comes."
  (let ((buffer (current-buffer))
        (generation forj-audit--generation))
    (setq forj-audit--state 'loading)
    (forj-audit--render)
    (forj-audit--call
     forj-audit--root "audit" (forj-audit--request offset forj-audit-page-size)
     (lambda (reply)
       (forj-audit--in buffer generation
         (setq forj-audit--rows (append forj-audit--rows (append (plist-get reply :rows) nil))
               forj-audit--next-offset (forj-audit--value (plist-get reply :next_offset))
               forj-audit--state nil)
         (forj-audit--render)))
     (lambda (message)
       (forj-audit--in buffer generation
         (setq forj-audit--state message)
         (forj-audit--render))))))

(defun forj-audit--value (value)
  "VALUE, with JSON null and false as nil."
  (if (memq value '(:null :false)) nil value))

(defun forj-audit--time (seconds)
  "SECONDS since the epoch as local date and time."
  (format-time-string "%Y-%m-%d %H:%M:%S" (seconds-to-time seconds)))

(defun forj-audit--entry (row)
  "The table entry of ROW."
  (let ((duration (forj-audit--value (plist-get row :duration_ms)))
        (files (append (plist-get row :files) nil))
        (outcome (plist-get row :outcome)))
    (list (cons (plist-get row :batch_id) (plist-get row :seq))
          (vector (forj-audit--time (plist-get row :time))
                  (plist-get row :tool)
                  (plist-get row :summary)
                  (plist-get row :decided_by)
                  (propertize outcome 'face (pcase outcome
                                              ("ok" 'success)
                                              ("refused" 'warning)
                                              ("error" 'error)
                                              (_ 'shadow)))
                  (if duration (format "%.0f" duration) "")
                  (string-join files " ")))))

(defun forj-audit--render ()
  "Redraw the table from the rows loaded, keeping point on its row."
  (setq tabulated-list-entries (mapcar #'forj-audit--entry forj-audit--rows))
  (tabulated-list-print t)
  (force-mode-line-update))

(defun forj-audit--row-at-point ()
  "The row at point, or signal."
  (let ((id (tabulated-list-get-id)))
    (or (and id (cl-find-if (lambda (row) (and (equal (plist-get row :batch_id) (car id))
                                               (equal (plist-get row :seq) (cdr id))))
                            forj-audit--rows))
        (user-error "No call on this line"))))

;;; Filters

(defun forj-audit--set-filter (key value)
  "Filter by KEY (:tool, :outcome, :text) with VALUE (nil or \"\" drops it); reload."
  (setq forj-audit--filter (plist-put forj-audit--filter key
                                      (and value (not (string-empty-p value)) value)))
  (forj-audit-refresh))

(defun forj-audit-filter-tool (tool)
  "Keep only the entries of TOOL (empty: every tool)."
  (interactive
   (list (completing-read "Tool (empty for all): "
                          (delete-dups (mapcar (lambda (row) (plist-get row :tool)) forj-audit--rows))
                          nil nil nil nil "")))
  (forj-audit--set-filter :tool tool))

(defun forj-audit-filter-outcome (outcome)
  "Keep only the entries whose OUTCOME is ok, error, refused or none.
An empty OUTCOME keeps all."
  (interactive (list (completing-read "Outcome (empty for all): " forj-audit--outcomes nil t)))
  (when (and outcome (not (string-empty-p outcome)) (not (member outcome forj-audit--outcomes)))
    (user-error "The outcome is one of %s" (string-join forj-audit--outcomes ", ")))
  (forj-audit--set-filter :outcome outcome))

(defun forj-audit-filter-text (text)
  "Keep only the entries holding TEXT (empty: all).
TEXT is looked for in the tool's name, the arguments, the reasons and
the error message."
  (interactive (list (read-string "Text (empty for all): " (plist-get forj-audit--filter :text))))
  (forj-audit--set-filter :text text))

(defun forj-audit-clear-filters ()
  "Drop every filter and reload."
  (interactive)
  (setq forj-audit--filter nil)
  (forj-audit-refresh))

;;; One call

(defun forj-audit-show ()
  "Show the call at point as it was received and its result as it was sent."
  (interactive)
  (let* ((row (forj-audit--row-at-point))
         (buffer (get-buffer-create "*forj-audit-call*")))
    (forj-audit--call
     forj-audit--root "audit_entry"
     (list :batch_id (plist-get row :batch_id) :seq (plist-get row :seq))
     (lambda (reply) (forj-audit--show-entry buffer row reply))
     (lambda (message) (message "forj: cannot show the call: %s" message)))))

(defun forj-audit--encode (value)
  "VALUE (a plist from the worker) as one line of JSON."
  (json-serialize value :null-object :null :false-object :false))

(defun forj-audit--json (value)
  "VALUE (a plist from the worker) as indented JSON text."
  (with-temp-buffer
    (insert (forj-audit--encode value))
    (let ((json-encoding-pretty-print t))
      (ignore-errors (json-pretty-print-buffer)))
    (buffer-string)))

(defun forj-audit--show-entry (buffer row reply)
  "Fill BUFFER with ROW and the call and result of REPLY, and show it."
  (with-current-buffer buffer
    (let ((inhibit-read-only t))
      (erase-buffer)
      (insert (format "%s  %s  (batch %s, call %s)\n"
                      (forj-audit--time (plist-get row :time))
                      (plist-get row :tool) (plist-get row :batch_id) (plist-get row :call_id)))
      (insert (format "Decided by: %s: %s\n" (plist-get row :decided_by) (plist-get row :decision)))
      (insert (format "Outcome: %s" (plist-get row :outcome))
              (let ((code (forj-audit--value (plist-get row :code))))
                (if code (format " (%s)" code) ""))
              "\n")
      (let ((files (append (plist-get row :files) nil)))
        (when files (insert "Files: " (string-join files " ") "\n")))
      (insert "\nCall:\n" (forj-audit--json (plist-get reply :call)) "\n")
      (let ((result (forj-audit--value (plist-get reply :result))))
        (insert "\nResult:\n" (if result (forj-audit--json result) "(none: it never ran)") "\n"))
      (goto-char (point-min))
      (special-mode)))
  (display-buffer buffer))

;;; Export

(defun forj-audit-export (file &optional callback)
  "Write every row the filters keep to FILE, one JSON object a line.
The rows are fetched from the worker page by page without waiting; a
message says when FILE is written.  CALLBACK, if non-nil, is then
called with the number of rows written, or with an error message."
  (interactive
   (list (read-file-name "Export the audit rows to: " nil nil nil "forj-audit.jsonl")))
  (unless forj-audit--root (user-error "Not in a forj audit buffer"))
  (let ((root forj-audit--root)
        (filter forj-audit--filter)
        (file (expand-file-name file))
        (rows nil))
    (cl-labels
        ((page (offset)
           (forj-audit--call
            root "audit"
            (let ((forj-audit--filter filter))
              (forj-audit--request offset (min 500 (max 1 forj-audit-page-size))))
            (lambda (reply)
              (setq rows (nconc rows (append (plist-get reply :rows) nil)))
              (let ((next (forj-audit--value (plist-get reply :next_offset))))
                (if (and next (< (length rows) forj-audit-export-limit))
                    (page next)
                  (finish))))
            (lambda (message)
              (message "forj: the export failed: %s" message)
              (when callback (funcall callback message)))))
         (finish ()
           (when (> (length rows) forj-audit-export-limit)
             (setq rows (cl-subseq rows 0 forj-audit-export-limit)))
           (let ((coding-system-for-write 'utf-8-unix))
            (with-temp-file file
             (dolist (row rows)
               (insert (forj-audit--encode row) "\n"))))
           (message "forj: %d audit rows written to %s" (length rows) file)
           (when callback (funcall callback (length rows)))))
      (page 0))))

(provide 'forj-audit)
;;; forj-audit.el ends here
